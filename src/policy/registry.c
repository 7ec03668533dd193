/* registry.c: the policies this build knows, in the order reports list them. */
#include <string.h>

#include "policy/policy.h"

extern const hbm_policy_class hbm_policy_bestfit;

const hbm_policy_class *const hbm_policy_classes[] = {
    &hbm_policy_bestfit,
};
const int hbm_policy_class_count = (int)(sizeof hbm_policy_classes / sizeof hbm_policy_classes[0]);

const hbm_policy_class *hbm_policy_find(const char *name) {
  for (int i = 0; i < hbm_policy_class_count; i++)
    if (!strcmp(hbm_policy_classes[i]->name, name)) return hbm_policy_classes[i];
  return NULL;
}

const char *hbm_policy_names(void) {
  static char names[256];
  if (!names[0]) {
    for (int i = 0; i < hbm_policy_class_count; i++) {
      if (i) strncat(names, ",", sizeof names - strlen(names) - 1);
      strncat(names, hbm_policy_classes[i]->name, sizeof names - strlen(names) - 1);
    }
  }
  return names;
}
