/* train_run.h: the one skeleton of `qkv train lm|vit|cnn|mlp|translation`
 * (train_run.c). A trainer fills a train_run (the folder, the optimizer's
 * options, the schedule, the qkv_trainer's batch and after_step) and its
 * hooks (the model and data, the lines before and after training); the
 * skeleton does the rest in one order for all: the run's folder and its
 * checkpoint path, AdamW or Adam with warm-up and cosine, the metadata
 * (kind, FAMILY.config, FAMILY.train, FAMILY.precision: docs/cli.md, "A
 * run's metadata"), --resume, --zero1, the ranks' agreement, qkv_train and
 * the failures' messages. docs/cli.md, "Adding a model family". */
#ifndef QKV_CLI_TRAIN_RUN_H
#define QKV_CLI_TRAIN_RUN_H
#include "cli/run_format.h"

typedef struct train_run train_run;

typedef struct {
    /* The model and data of a new run, or of the one in t->ckpt on
     * --resume (its FAMILY.train read with train_run_read_train); sets
     * t->params, t->config, t->train and the schedule. */
    qkv_status (*setup)(train_run *t);
    /* On --resume, after the checkpoint's state is loaded (may be NULL). */
    qkv_status (*resumed)(train_run *t);
    /* Rank 0, before the ranks agree (may be NULL). */
    qkv_status (*before_agree)(train_run *t);
    /* The lines before training; more after --zero1's note (may be NULL). */
    void (*describe)(train_run *t);
    void (*describe_more)(train_run *t);
    /* After training: the closing lines, plots; an exit status (failures
     * through train_run_fail). */
    int (*finish)(train_run *t, int64_t first_step, double seconds);
    /* Frees what setup made (always called). */
    void (*free)(train_run *t);
} train_hooks;

enum { TRAIN_META_MAX = 12 };

struct train_run {
    /* the trainer's, before train_run_main */
    const char *cmd;       /* "train lm", for messages */
    const char *family;    /* "lm", "vision", "translation": the metadata's prefix */
    const char *kind;      /* metadata "kind": lm, vit, cnn, mlp, translation */
    const char *out, *ckpt_name;
    int resume, zero1;
    int exists_is_usage;   /* an existing checkpoint without --resume: exit 2 ("already holds a model") */
    int64_t batch;         /* > 0: checked against the ranks (and the uneven split's note) */
    int keep_rng;          /* the generator t->rng goes into the checkpoints */
    const char *training_what; /* qkv_train's failure: "WHAT: message" (NULL: the message) */
    const train_hooks *hooks;
    void *user;
    qkv_dist *dist;
    /* setup's */
    qkv_params *params;
    qkv_optim_opts optim;  /* AdamW (qkv_optim_adamw_opts_default) or Adam, lr, weight decay */
    qkv_schedule sched;
    int has_schedule;
    qkv_precision precision;
    int precision_read;    /* setup has read the precision of the run resumed itself */
    qkv_trainer tr;        /* steps, checkpoint_every, progress, unit, batch, after_step, clip, ... */
    char config[2048], train[2048]; /* FAMILY.config, FAMILY.train ("" for none) */
    /* the skeleton's */
    char ckpt[1100];
    qkv_optim *opt;
    qkv_ctx *c, *eval;
    qkv_rng rng;
    qkv_train_pos pos;
    int64_t zero1_saved;
    int agreed;            /* every rank's setup went well */
    int reported;          /* the failure's message is printed already */
    int stopped;           /* qkv_train's failure is a planned stop (--time-limit) */
    int fail_exit;         /* the exit status of a failure (0: QKV_EXIT_FAILURE) */
    const char *keys[TRAIN_META_MAX], *vals[TRAIN_META_MAX];
    qkv_checkpoint_meta meta;
};

/* The usage lines of the options the AdamW trainers share (--precision,
 * --seed, --threads, --zero1), for their usage text. */
#define TRAIN_RUN_USAGE_COMMON                                                                      \
    "      --precision P      the matmuls' precision: fp32 (default) or bf16 (bf16 inputs,\n"       \
    "                         FP32 sums, like PyTorch's autocast; docs/bf16.md)\n"                 \
    "  -s, --seed S           (default 1)\n"                                                        \
    "  -j, --threads N        OpenMP threads (default: OMP_NUM_THREADS or all cores;\n"             \
    "                         under mpirun, per rank)\n"                                           \
    "      --zero1            under mpirun: each rank keeps 1/N of AdamW's moments (ZeRO-1)\n"

/* Runs the skeleton; the exit status. t->dist must be started. */
int train_run_main(train_run *t);
/* Prints "WHAT: message" (the last failure's; under mpirun "rank R: ..."),
 * tells the other ranks before the agreement; QKV_EXIT_FAILURE (or
 * t->fail_exit). */
int train_run_fail(train_run *t, const char *what);
/* One more metadata pair (pointers kept: they live as long as the run). */
qkv_status train_run_meta(train_run *t, const char *key, const char *val);
/* On --resume: the checkpoint's FAMILY.train into obj through fields;
 * legacy (may be NULL) reads the one-line format of older runs (deprecated,
 * read only), returning 0 when malformed. */
qkv_status train_run_read_train(train_run *t, const rf_field *f, int n, void *obj, size_t size,
                                int (*legacy)(const char *text, void *obj));
/* The folder dir and its parents (mkdir -p); 0 or -1 with errno. */
int train_run_mkdir(const char *dir);
#endif
