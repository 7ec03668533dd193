/* fuzz_policies.h: the policy names of hbm_policy_names(), split once, for
 * the fuzz targets that pick or visit policies. */
#ifndef HBM_FUZZ_POLICIES_H
#define HBM_FUZZ_POLICIES_H

#include <string.h>

#include "hbm.h"

/* Points *names at the policy names; returns how many (at most 16). */
static inline int fuzz_policies(const char *const **names) {
  static const char *policies[16];
  static int npolicies;
  static char buf[256];
  if (!npolicies) {
    strncpy(buf, hbm_policy_names(), sizeof buf - 1);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p && npolicies < 16; p = strtok_r(NULL, ",", &save))
      policies[npolicies++] = p;
  }
  *names = policies;
  return npolicies;
}

#endif
