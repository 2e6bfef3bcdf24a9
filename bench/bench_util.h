/* bench_util.h: what the benchmark programs share: TRY (a failed qkv call
 * prints the library's message and exits: a benchmark has nothing to
 * recover) and a monotonic clock in seconds. */
#ifndef QKV_BENCH_UTIL_H
#define QKV_BENCH_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "qkv.h"

#define TRY(x)                                                                    \
    do {                                                                          \
        if ((x) != QKV_OK) {                                                      \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, qkv_last_error()); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#endif
