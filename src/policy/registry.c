/* registry.c: the policies this build knows, in the order reports list them. */
#include <pthread.h>
#include <string.h>

#include "policy/policy.h"

extern const hbm_policy_class hbm_policy_bestfit;
extern const hbm_policy_class hbm_policy_caching, hbm_policy_expandable, hbm_policy_zoned;
extern const hbm_policy_class hbm_policy_compact;

const hbm_policy_class *const hbm_policy_classes[] = {
    &hbm_policy_bestfit,
    &hbm_policy_caching,
    &hbm_policy_expandable,
    &hbm_policy_zoned,
    &hbm_policy_compact,
};
const int hbm_policy_class_count = (int)(sizeof hbm_policy_classes / sizeof hbm_policy_classes[0]);

const hbm_policy_class *hbm_policy_find(const char *name) {
  for (int i = 0; i < hbm_policy_class_count; i++)
    if (!strcmp(hbm_policy_classes[i]->name, name)) return hbm_policy_classes[i];
  return NULL;
}

/* Built once: callers on any thread get the same finished string. */
static char names[256];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;
static void build_names(void) {
  for (int i = 0; i < hbm_policy_class_count; i++) {
    if (i) strncat(names, ",", sizeof names - strlen(names) - 1);
    strncat(names, hbm_policy_classes[i]->name, sizeof names - strlen(names) - 1);
  }
}

const char *hbm_policy_names(void) {
  pthread_once(&names_once, build_names);
  return names;
}
