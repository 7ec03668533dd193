/* test_plan_csv: MiniMalloc's CSV reader (trace/plan_csv.h). Every refusal
 * names its line and what was expected, and leaves the output untouched;
 * MiniMalloc's column aliases and inclusive `end` are read as it reads them;
 * seeded random problems survive render -> parse unchanged; the public
 * planning inputs in ../shared/data/plans (where present) parse and plan
 * validly. */
#include <dirent.h>

#include "core/dsa.h"
#include "hbm.h"
#include "testutil.h"
#include "trace/plan_csv.h"
#include "trace/trace.h"

static int parse(const char *text, hbm_plan_input *in, hbm_diag *diag) {
  memset(diag, 0, sizeof *diag);
  return hbm_plan_csv_parse(text, strlen(text), "t.csv", in, diag);
}

static void good_inputs(void) {
  hbm_plan_input in;
  hbm_diag d;
  CHECK(parse("id,lower,upper,size\n0,45,247,589825\n1,488,521,16385\n", &in, &d) == HBM_OK);
  CHECK_EQ_U64(in.n, 2);
  CHECK(!strcmp(in.ids[1], "1"));
  CHECK_EQ_U64(in.blocks[0].start, 45);
  CHECK_EQ_U64(in.blocks[0].end, 247);
  CHECK_EQ_U64(in.blocks[1].size, 16385);
  CHECK_EQ_U64(in.lines[1], 3);
  CHECK(in.offsets == NULL && in.align_log2 == NULL && in.align == 1);
  hbm_plan_input_free(&in);
  CHECK(in.blocks == NULL && in.n == 0);

  /* MiniMalloc's aliases, an inclusive end, columns in another order, a
   * column it does not know, spaces, CRLF, blank lines, a byte order mark,
   * no final newline. */
  CHECK(parse("\xef\xbb\xbf" "size, buffer_id ,begin,end,note\r\n\r\n 64 , conv1 ,\t0\t, 9 ,x\r\n+8,b,3,3,y", &in, &d) ==
        HBM_OK);
  CHECK_EQ_U64(in.n, 2);
  CHECK(!strcmp(in.ids[0], "conv1"));
  CHECK_EQ_U64(in.blocks[0].size, 64);
  CHECK_EQ_U64(in.blocks[0].end, 10); /* end 9 is the last time it lives */
  CHECK_EQ_U64(in.blocks[1].start, 3);
  CHECK_EQ_U64(in.blocks[1].end, 4);
  CHECK_EQ_U64(in.blocks[1].size, 8);
  CHECK_EQ_U64(in.lines[0], 3);
  hbm_plan_input_free(&in);

  /* Alignment and offsets. */
  CHECK(parse("id,lower,upper,size,alignment,offset\na,0,10,4,8,0\nb,5,15,4,4,8\n", &in, &d) == HBM_OK);
  CHECK(in.align_log2 && in.align_log2[0] == 3 && in.align_log2[1] == 2);
  CHECK_EQ_U64(in.align, 8);
  CHECK(in.offsets && in.offsets[1] == 8);
  char *text;
  size_t len;
  CHECK(hbm_plan_csv_render(&in, in.offsets, &text, &len) == HBM_OK);
  CHECK(!strcmp(text, "id,lower,upper,size,alignment,offset\na,0,10,4,8,0\nb,5,15,4,4,8\n"));
  CHECK_EQ_U64(len, strlen(text));
  free(text);
  /* the writer's arguments: each out-pointer is needed */
  CHECK(hbm_plan_csv_render(&in, in.offsets, NULL, &len) == HBM_EINVAL);
  CHECK(hbm_plan_csv_render(&in, in.offsets, &text, NULL) == HBM_EINVAL);
  CHECK(hbm_plan_csv_render(&in, NULL, &text, &len) == HBM_EINVAL);
  hbm_plan_input_free(&in);

  /* The latest end there is reads back as an upper. */
  CHECK(parse("begin,end,buffer,size\n0,4611686018427387902,a,10\n", &in, &d) == HBM_OK);
  CHECK_EQ_U64(in.blocks[0].end, HBM_PLAN_MAX_VALUE - 1);
  CHECK(hbm_plan_csv_render(&in, (uint64_t[]){0}, &text, &len) == HBM_OK);
  hbm_plan_input_free(&in);
  CHECK(hbm_plan_csv_parse(text, len, "t.csv", &in, &d) == HBM_OK);
  CHECK_EQ_U64(in.n, 1);
  free(text);
  hbm_plan_input_free(&in);

  /* A header alone is a problem with nothing to place. */
  CHECK(parse("id,lower,upper,size\n", &in, &d) == HBM_OK);
  CHECK_EQ_U64(in.n, 0);
  hbm_plan_input_free(&in);

  /* Not NUL-terminated: the reader stops at len. */
  const char *longer = "id,lower,upper,size\na,0,1,5\nb,0,1,7\n";
  CHECK(hbm_plan_csv_parse(longer, strlen(longer) - 8, "t.csv", &in, &d) == HBM_OK);
  CHECK_EQ_U64(in.n, 1);
  hbm_plan_input_free(&in);
}

static void bad_inputs(void) {
  static const struct {
    const char *text;
    uint64_t line;
    const char *says;
  } cases[] = {
      {"", 1, "no header"},
      {"\n\n", 1, "no header"},
      {"id,lower,upper\n", 1, "no 'size' column"},
      {"id,lower,size,size\n", 1, "column 'size' twice"},
      {"buffer,id,lower,upper,size\n", 1, "column 'id' twice"},
      {"id,lower,upper,size,gaps\n", 1, "gaps"},
      {"id,lower,upper,size\na,0,1\n", 2, "3 fields: expected 4"},
      {"id,lower,upper,size\na,0,1,2\n\nb,0,1,2,3\n", 4, "5 fields"},
      {"id,lower,upper,size\na,x,1,2\n", 2, "lower 'x'"},
      {"id,lower,upper,size\na,-1,1,2\n", 2, "lower '-1'"},
      {"id,lower,upper,size\na,0,1.5,2\n", 2, "upper '1.5'"},
      {"id,start,end,size\na,0,,2\n", 2, "end ''"},
      {"id,lower,upper,size\na,5,5,2\n", 2, "expected lower < upper"},
      {"id,start,end,size\na,5,3,2\n", 2, "lower 5, end 3: expected lower <= end"},
      {"id,start,end,size\na,0,4611686018427387903,2\n", 2, "end '4611686018427387903'"}, /* 2^62 - 1 */
      {"id,lower,upper,size\ra,0,1,2\r", 1, "lines that end in CR alone (byte 19; the file has no LF)"},
      /* one CR ends a line before its LF, no more: two, or one before a space, is no CR LF */
      {"id,lower,upper,size\r\na,0,1,2\r\r\n", 2, "a carriage return inside the line (byte 28)"},
      {"id,lower,upper,size\na,0,1,2\r \n", 2, "a carriage return inside the line (byte 27)"},
      {"id,lower,upper,size\n\r\r\na,0,1,2\n", 2, "a carriage return inside the line (byte 20)"},
      {"id,lower,upper,size\na,0,4611686018427387904,2\n", 2, "upper"}, /* 2^62 */
      {"id,lower,upper,size\na,0,1,0\n", 2, "size '0'"},
      {"id,lower,upper,size\na,0,1,99999999999999999999999\n", 2, "size '"},
      {"id,lower,upper,size\na,0,1,1152921504606846976\nb,0,1,1\n", 3, "add up past 2^60"},
      {"id,lower,upper,size,alignment\na,0,1,2,3\n", 2, "alignment '3'"},
      {"id,lower,upper,size,alignment\na,0,1,2,0\n", 2, "alignment '0'"},
      {"id,lower,upper,size,alignment\na,0,1,2,2147483648\n", 2, "alignment"},
      {"id,lower,upper,size,offset\na,0,1,2,x\n", 2, "offset 'x'"},
      {"id,lower,upper,size,offset\na,0,1,2,4611686018427387903\n", 2, "offset"},
      {"id,lower,upper,size\n,0,1,2\n", 2, "an empty id"},
      {"id,lower,upper,size\na,0,1,2\nb,0,1,2\na,3,4,5\n", 4, "id 'a' again (first on line 2)"},
      {"id,lower,upper,size\na,0,1,2\na,3,4,5\n", 3, "id 'a' again (first on line 2)"}, /* only two buffers */
      /* a repeat before a line refused for something else: the repeat, met first */
      {"id,lower,upper,size\na,0,1,2\na,3,4,5\nb,0,1,x\n", 3, "id 'a' again (first on line 2)"},
      /* the first repeat a reader meets, whatever the ids sort as */
      {"id,lower,upper,size\nb,0,1,2\na,0,1,2\nb,0,1,2\na,0,1,2\nb,0,1,2\n", 4, "id 'b' again (first on line 2)"},
      {"id,lower,upper,size\na,\x7f,1,2\n", 2, "lower '?'"}, /* DEL shown as '?', as other control bytes */
      {"id,lower,upper,size\n\"a\",0,1,2\n", 2, "quoted"},
      {"id,lower,upper,size\na\n", 2, "1 field: expected 4, as the header has"},
      /* past the most a header has (64): counted all the same, against this header's 4 */
      {"id,lower,upper,size\na,0,1,2,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,\n", 2,
       "71 fields: expected 4, as the header has"},
      {"id,lower,upper,size,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,\n", 1,
       "more than 64 fields: expected id, lower, upper, size and few others"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    hbm_plan_input in;
    memset(&in, 0xab, sizeof in);
    hbm_diag d;
    int rc = parse(cases[k].text, &in, &d);
    if (rc != HBM_EPARSE || d.line != cases[k].line || !strstr(d.message, cases[k].says) || strcmp(d.file, "t.csv")) {
      fprintf(stderr, "case %zu: rc %d, %s:%llu: %s (expected line %llu saying '%s')\n", k, rc, d.file,
              (unsigned long long)d.line, d.message, (unsigned long long)cases[k].line, cases[k].says);
      CHECK(0);
    }
    unsigned char *p = (unsigned char *)&in;
    int untouched = 1;
    for (size_t i = 0; i < sizeof in; i++) untouched &= p[i] == 0xab;
    CHECK(untouched);
  }
  /* A NUL byte: by its line, the message giving its offset (one at byte 0 too). */
  hbm_plan_input in;
  hbm_diag d = {0};
  /* an error on a line is at the line's first byte */
  CHECK(parse("id,lower,upper,size\na,0,1\n", &in, &d) == HBM_EPARSE);
  CHECK(d.line == 2 && d.offset == 20);
  CHECK(hbm_plan_csv_parse("id,lower\0,upper", 15, "t.csv", &in, &d) == HBM_EPARSE);
  CHECK(d.line == 1 && d.offset == 8 && strstr(d.message, "NUL byte (byte 8)"));
  CHECK(hbm_plan_csv_parse("id,size\na,\0", 12, "t.csv", &in, &d) == HBM_EPARSE);
  CHECK(d.line == 2 && d.offset == 10 && strstr(d.message, "NUL byte (byte 10)"));
  CHECK(hbm_plan_csv_parse("\0", 1, "t.csv", &in, &d) == HBM_EPARSE);
  CHECK(d.line == 1 && d.offset == 0 && strstr(d.message, "NUL byte (byte 0)"));
}

/* What a message quotes reaches a terminal: no C0 or C1 control (CSI is
 * U+009B, or the byte 0x9b alone), no byte that is no UTF-8; other UTF-8
 * whole, never cut inside a character at the 40 bytes shown. */
static void quoting(void) {
  char buf[48];
  CHECK(!strcmp(hbm_plan_csv_quote("a\x1b[2Jb\x7f", 7, buf), "a?[2Jb?"));
  CHECK(!strcmp(hbm_plan_csv_quote("\xc2\x9b" "31m|\x9b" "2J", 9, buf), "??31m|?2J"));
  CHECK(!strcmp(hbm_plan_csv_quote("caf\xc3\xa9 \xc2\xa0\xe2\x82\xac", 11, buf), "caf\xc3\xa9 \xc2\xa0\xe2\x82\xac"));
  CHECK(!strcmp(hbm_plan_csv_quote("\xe2\x82", 2, buf), "??")); /* a character cut short by the text's end */
  char long_id[64];
  memset(long_id, 'x', 39);
  memcpy(long_id + 39, "\xe2\x82\xac", 3); /* a character across the 40 bytes */
  CHECK(!strcmp(hbm_plan_csv_quote(long_id, 42, buf), "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."));
  memset(long_id, 'y', 40);
  CHECK(!strcmp(hbm_plan_csv_quote(long_id, 40, buf), "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"));
}

/* Random problems, rendered with offsets and read back: the same buffers. */
static void round_trips(uint64_t *rng, int rounds) {
  for (int round = 0; round < rounds; round++) {
    size_t n = (size_t)test_rand_below(rng, 200);
    hbm_plan_input in = {0};
    in.n = n;
    in.blocks = malloc((n ? n : 1) * sizeof *in.blocks);
    in.ids = malloc((n ? n : 1) * sizeof *in.ids);
    in.id_pool = malloc(n * 24 + 1);
    in.align = 1;
    if (round % 2) in.align_log2 = malloc(n ? n : 1);
    uint64_t *offsets = malloc((n ? n : 1) * sizeof *offsets);
    for (size_t i = 0; i < n; i++) {
      uint64_t start = test_rand_below(rng, round % 3 ? 1000 : HBM_PLAN_MAX_VALUE - 1);
      uint64_t end = start + 1 + test_rand_below(rng, HBM_PLAN_MAX_VALUE - 1 - start);
      in.blocks[i] = (hbm_dsa_block){1 + test_rand_below(rng, round % 3 ? 1u << 20 : HBM_PLAN_MAX_TOTAL / 256), start,
                                     end};
      in.ids[i] = in.id_pool + 24 * i;
      snprintf(in.ids[i], 24, "%s%zu", test_rand_below(rng, 2) ? "buf" : "", i);
      if (in.align_log2) in.align_log2[i] = (uint8_t)test_rand_below(rng, 31);
      offsets[i] = test_rand_below(rng, HBM_PLAN_MAX_VALUE - in.blocks[i].size);
    }
    char *text;
    size_t len;
    CHECK(hbm_plan_csv_render(&in, offsets, &text, &len) == HBM_OK);
    hbm_plan_input back;
    hbm_diag d = {0};
    int rc = hbm_plan_csv_parse(text, len, "rt.csv", &back, &d);
    CHECK(rc == HBM_OK);
    if (rc != HBM_OK) fprintf(stderr, "round %d: %s:%llu: %s\n", round, d.file, (unsigned long long)d.line, d.message);
    if (rc == HBM_OK) {
      CHECK_EQ_U64(back.n, n);
      CHECK(back.offsets != NULL);
      CHECK((back.align_log2 != NULL) == (in.align_log2 != NULL));
      for (size_t i = 0; i < n && i < back.n; i++) {
        CHECK(!strcmp(back.ids[i], in.ids[i]));
        CHECK(!memcmp(&back.blocks[i], &in.blocks[i], sizeof in.blocks[i]));
        CHECK_EQ_U64(back.offsets[i], offsets[i]);
        if (in.align_log2) CHECK_EQ_U64(back.align_log2[i], in.align_log2[i]);
      }
      hbm_plan_input_free(&back);
    }
    free(text);
    free(offsets);
    hbm_plan_input_free(&in);
  }
}

/* The public inputs: each parses, and hbm's plan of it is valid and never
 * below its peak load. */
static void shared_plans(void) {
  const char *data = test_shared_data();
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/plans", data ? data : ".");
  DIR *d = data ? opendir(dir) : NULL;
  if (!d) {
    printf("test_plan_csv: ../shared/data/plans absent: the public planning inputs were not read\n");
    return;
  }
  struct dirent *e;
  int read = 0;
  while ((e = readdir(d))) {
    size_t nl = strlen(e->d_name);
    if (nl < 5 || strcmp(e->d_name + nl - 4, ".csv") || !strcmp(e->d_name, "S_1.csv")) continue; /* S_1: 10 s */
    char path[8300], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    hbm_diag diag = {0};
    hbm_plan_input in;
    int read_rc = hbm_read_file(path, &text, &len, &diag);
    CHECK(read_rc == HBM_OK);
    if (read_rc != HBM_OK) continue;
    int rc = hbm_plan_csv_parse(text, len, path, &in, &diag);
    free(text);
    CHECK(rc == HBM_OK);
    if (rc != HBM_OK) continue;
    uint64_t *off = malloc(in.n * sizeof *off), fp;
    size_t first, second;
    CHECK(hbm_dsa_plan(in.blocks, in.n, 0, in.align, off, &fp) == HBM_OK);
    CHECK(hbm_dsa_first_conflict(in.blocks, in.n, 0, off, &first, &second) == 0);
    CHECK(fp >= hbm_dsa_peak(in.blocks, in.n, 0));
    printf("test_plan_csv: %s: %zu buffers, footprint %+.2f%% over the peak load\n", e->d_name, in.n,
           100.0 * ((double)fp / (double)hbm_dsa_peak(in.blocks, in.n, 0) - 1.0));
    free(off);
    hbm_plan_input_free(&in);
    read++;
  }
  closedir(d);
  CHECK(read > 0);
}

int main(void) {
  uint64_t rng = test_seed("test_plan_csv");
  good_inputs();
  bad_inputs();
  quoting();
  int rounds = (int)(300 * test_scale());
  round_trips(&rng, rounds < 20 ? 20 : rounds);
  shared_plans();
  return test_done("test_plan_csv");
}
