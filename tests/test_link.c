/* test_link.c: a program outside the library builds against the build tree
 * the way the README says, without installing: examples/tour.c (the
 * README's quick tour) compiled with
 *   cc examples/tour.c $(PKG_CONFIG_PATH=BUILD pkg-config --cflags --libs qkv)
 * (no rpath: it runs with LD_LIBRARY_PATH=BUILD), and by a tiny CMake project
 * through find_package(qkv) and qkv::qkv (-Dqkv_DIR=BUILD/cmake; skipped,
 * and said so, where cmake is not installed); each is run: it must print
 * causal weights (query 0 sees only key 0) and take an AdamW step. BUILD is
 * this test's build folder (build/ or build-san/, found from argv[0]); under
 * the sanitizers the program is compiled with them too, as a library built
 * with them needs. */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath, popen, WEXITSTATUS */
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

#ifdef __SANITIZE_ADDRESS__
#define SAN_FLAGS "-fsanitize=address,undefined"
#else
#define SAN_FLAGS ""
#endif

/* Runs cmd through the shell, its output into out (n bytes); the exit status. */
static int run(const char *cmd, char *out, size_t n)
{
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t got = fread(out, 1, n - 1, f);
    out[got] = '\0';
    int rc = pclose(f);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Runs the tour by cmd and checks what it prints; how names the build. */
static void check_tour(const char *cmd, const char *how)
{
    static char out[1 << 16];
    int rc = run(cmd, out, sizeof out);
    CHECK(rc == 0, "the tour (%s) runs: exit %d: %s", how, rc, out);
    CHECK(strstr(out, "out (2,16,64), weights (2,16,16); w[0][0][0] = 1.0000") != NULL,
          "the tour's causal weights: query 0 sees only key 0: %s", out);
    float w10 = -1, w11 = -1;
    const char *at = strstr(out, "w[0][1][0..1] = ");
    if (at) sscanf(at + strlen("w[0][1][0..1] = "), "%f %f", &w10, &w11);
    CHECK(w10 > 0 && w11 > 0 && fabsf(w10 + w11 - 1) < 2e-4f,
          "query 1's two weights sum to 1: %g + %g", w10, w11);
    CHECK(strstr(out, "one AdamW step taken") != NULL, "the tour steps AdamW: %s", out);
}

/* examples/tour.c built by CMake in tmp/cmake: find_package(qkv) from
 * BUILD/cmake, linked to qkv::qkv, then run. */
static void check_cmake(const char *build, const char *tmp)
{
    char cmd[4 * PATH_MAX];
    static char out[1 << 16];
    if (run("cmake --version >/dev/null 2>&1", out, sizeof out) != 0) {
        printf("cmake not found: the CMake consumer not checked\n");
        return;
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/cmake' && cp '%s/../examples/tour.c' '%s/cmake/' && "
             "printf 'cmake_minimum_required(VERSION 3.10)\\nproject(tour C)\\n"
             "find_package(qkv 0.1 REQUIRED)\\nadd_executable(tour tour.c)\\n"
             "target_link_libraries(tour qkv::qkv m)\\n' > '%s/cmake/CMakeLists.txt' && "
             "cmake -S '%s/cmake' -B '%s/cmake/b' -Dqkv_DIR='%s/cmake' -DCMAKE_C_FLAGS='%s' 2>&1 && "
             "cmake --build '%s/cmake/b' 2>&1", tmp, build, tmp, tmp, tmp, tmp, build, SAN_FLAGS, tmp);
    int rc = run(cmd, out, sizeof out);
    CHECK(rc == 0, "examples/tour.c builds with CMake, find_package(qkv) from %s/cmake: exit %d:\n%s",
          build, rc, out);
    snprintf(cmd, sizeof cmd, "'%s/cmake/b/tour' 2>&1", tmp);
    check_tour(cmd, "CMake");
}

int main(int argc, char **argv)
{
    (void)argc;
    char build[PATH_MAX], self[PATH_MAX], tmp[64] = "/tmp/qkv_link_XXXXXX", cmd[3 * PATH_MAX];
    static char out[1 << 16];
    if (!realpath(argv[0], self) || !mkdtemp(tmp)) return 1;
    *strrchr(self, '/') = '\0';              /* BUILD/tests */
    snprintf(build, sizeof build, "%s", self);
    *strrchr(build, '/') = '\0';             /* BUILD */
    snprintf(cmd, sizeof cmd, "PKG_CONFIG_PATH='%s' pkg-config --cflags --libs qkv 2>&1", build);
    int rc = run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "-lqkv") && strstr(out, "/include"),
          "pkg-config finds the build tree's qkv.pc: exit %d: %s", rc, out);
    CHECK(!strstr(out, "rpath"), "qkv.pc sets no rpath: %s", out);
    snprintf(cmd, sizeof cmd,
             "cc -std=c11 %s '%s/../examples/tour.c' $(PKG_CONFIG_PATH='%s' pkg-config --cflags "
             "--libs qkv) -o '%s/tour' 2>&1", SAN_FLAGS, build, build, tmp);
    rc = run(cmd, out, sizeof out);
    CHECK(rc == 0, "examples/tour.c builds against %s without installing: exit %d:\n%s", build, rc, out);
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH='%s' '%s/tour' 2>&1", build, tmp);
    check_tour(cmd, "pkg-config");
    check_cmake(build, tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return h_finish("test_link");
}
