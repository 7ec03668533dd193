/* quickstart.c: the README's example. Builds against an installed libhbm
 * (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig for a prefix pkg-config does not search):
 *   cc quickstart.c $(pkg-config --cflags --libs hbm) -Wl,-rpath,$(pkg-config --variable=libdir hbm) -o quickstart
 * The rpath lets it find libhbm.so.0 at run time in a prefix the loader does
 * not search (without it: "cannot open shared object file"; ldconfig, for a
 * system prefix, or LD_LIBRARY_PATH do the same). Or link it statically:
 *   cc quickstart.c $(pkg-config --cflags hbm) $(pkg-config --variable=libdir hbm)/libhbm.a -lpthread -lm -ldl -o quickstart
 */
#include <hbm.h>
#include <stdio.h>

static void on_error(int err, const char *message, void *arg) {
  (void)err; /* the code the failing call returns as well */
  (void)arg; /* the pointer given to hbm_set_error_handler: none here */
  fprintf(stderr, "hbm: %s\n", message);
}

int main(void) {
  hbm_set_error_handler(on_error, NULL);
  hbm_device *dev;
  hbm_heap *heap;
  if (hbm_device_open("sim:96GiB", &dev) != HBM_OK) return 1;
  if (hbm_heap_create(dev, "bestfit", NULL, &heap) != HBM_OK) return 1;

  /* Weights, then activations and AllReduce buffers interleaved. */
  uint64_t weights, act[4], comm[4];
  hbm_alloc(heap, 60ull << 30, HBM_TAG_PARAM, 0, &weights);
  for (int i = 0; i < 4; i++) {
    hbm_alloc(heap, 3ull << 30, HBM_TAG_COMM, 1, &comm[i]);
    hbm_alloc(heap, 5ull << 30, HBM_TAG_ACT, 0, &act[i]);
  }
  for (int i = 0; i < 4; i++) hbm_free(heap, comm[i]); /* holes between activations */

  hbm_stats st;
  hbm_heap_stats(heap, &st);
  printf("free total %.1f GiB, largest free %.1f GiB, fragmentation ratio %.2f\n",
         st.free_total / 1073741824.0, st.largest_free / 1073741824.0, st.fragmentation);

  uint64_t big;
  int rc = hbm_alloc(heap, 4509715661ull, HBM_TAG_COMM, 1, &big); /* 4.2 GiB */
  printf("4.2 GiB AllReduce buffer: %s\n", rc == HBM_OK ? "placed" : hbm_strerror(rc));

  if (hbm_check(heap) != HBM_OK) return 1;
  hbm_heap_destroy(heap);
  hbm_device_close(dev);
  return 0;
}
