/* cli.h: what the qkv command's files share. */
#ifndef QKV_CLI_H
#define QKV_CLI_H
#include "qkv.h"

#define QKV_CLI_TRY(expr)                                                        \
    do {                                                                         \
        qkv_status s_ = (expr);                                                  \
        if (s_ != QKV_OK) return s_;                                             \
    } while (0)

/* qkv toy ...: the lecture's toy experiment; returns the exit code. */
int qkv_cli_toy(int argc, char **argv);
/* qkv inspect FILE.safetensors: lists a file; returns the exit code. */
int qkv_cli_inspect(int argc, char **argv);
#endif
