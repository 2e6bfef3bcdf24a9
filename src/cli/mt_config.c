/* mt_config.c: a translation run's configuration (mt.h): written into the
 * checkpoint's metadata in the run format (translation.config: the model,
 * translation.train: how it was trained, translation.precision), and read
 * from there or, for runs of older versions, from the config.txt beside
 * the checkpoint ("key value" lines, deprecated, read only). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/mt.h"
#include "cli/run_format.h"

static const char *const model_names[] = {"rnn", "transformer"}, *const dir_names[] = {"en-fr", "fr-en"};

static const char *rnn_text(int v) { return v == QKV_RNN_LSTM ? "lstm" : v == QKV_RNN_GRU ? "gru" : NULL; }
static int rnn_read(const char *s, int *v)
{
    if (strcmp(s, "gru") && strcmp(s, "lstm")) return 0;
    *v = strcmp(s, "gru") ? QKV_RNN_LSTM : QKV_RNN_GRU;
    return 1;
}
static const char *attention_text(int v) { return qkv_rnn_attention_name((qkv_rnn_attention)v); }
static int attention_read(const char *s, int *v)
{
    qkv_rnn_attention a;
    if (qkv_rnn_attention_parse(s, &a) != QKV_OK) return 0;
    *v = (int)a;
    return 1;
}
static const char *precision_text(int v) { return qkv_cli_precision_name((qkv_precision)v); }
static int precision_read(const char *s, int *v)
{
    qkv_precision p;
    if (!qkv_cli_precision_parse(s, &p)) return 0;
    *v = (int)p;
    return 1;
}

/* translation.config, then translation.train, then (config.txt only) the precision. */
static const rf_field fields[] = {
    RF_CHOICE(mt_config, model, model_names, 2),
    RF_ENUM(mt_config, rnn, rnn_text, rnn_read),
    RF_ENUM(mt_config, attention, attention_text, attention_read),
    RF_NUM(mt_config, bidirectional, RF_INT, 0, 1),
    RF_NUM(mt_config, layers, RF_I64, 1, 64),
    RF_NUM(mt_config, embed, RF_I64, 1, 65536),
    RF_NUM(mt_config, hidden, RF_I64, 1, 65536),
    RF_NUM(mt_config, heads, RF_I64, 1, 1024),
    RF_NUM(mt_config, rank, RF_I64, 0, 65536),
    RF_NUM(mt_config, max_len, RF_I64, 2, 4096),
    RF_NUM(mt_config, dropout, RF_F64, 0, 1e300),
    RF_CHOICE_AS("direction", mt_config, reverse, dir_names, 2),
    RF_NUM(mt_config, src_vocab, RF_I64, 5, 1099511627776.0),
    RF_NUM(mt_config, tgt_vocab, RF_I64, 5, 1099511627776.0),
    /* translation.train */
    RF_STRING(mt_config, data),
    RF_NUM(mt_config, max_words, RF_I64, 1, 4096),
    RF_NUM(mt_config, batch, RF_I64, 1, 1 << 20),
    RF_NUM(mt_config, steps, RF_I64, 0, 1099511627776.0),
    RF_NUM(mt_config, lr, RF_F64, 0, 1e300),
    RF_NUM(mt_config, clip, RF_F64, 0, 1e300),
    RF_NUM(mt_config, teacher_forcing, RF_F64, 0, 1e300),
    RF_NUM(mt_config, seed, RF_U64, 0, 0),
    /* config.txt only */
    RF_ENUM(mt_config, precision, precision_text, precision_read)};
enum { N_CONFIG = 14, N_TRAIN = 8, RANK = 8, DATA = 14, PRECISION = 22 };

qkv_status mt_config_format(const mt_config *c, char *config, size_t nc, char *train, size_t nt)
{
    QKV_CLI_TRY(rf_write(fields, N_CONFIG, c, config, nc));
    return rf_write(fields + N_CONFIG, N_TRAIN, c, train, nt);
}

int mt_config_dir(const char *cmd, const char *arg, char *dir, size_t cap)
{
    struct stat st;
    if (stat(arg, &st) != 0) return qkv_cli_report(cmd, "cannot open %s: %s", arg, strerror(errno));
    const char *slash = strrchr(arg, '/');
    if (S_ISDIR(st.st_mode)) snprintf(dir, cap, "%s", arg);
    else if (!slash) snprintf(dir, cap, ".");
    else if (slash == arg) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - arg), arg);
    return 0;
}

/* An older run's DIR/config.txt ("key value" lines; its kind, and the
 * tokenizers' fixed names, skipped) as the run format's lines into c. */
static int legacy_read(const char *cmd, const char *dir, mt_config *c)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, MT_CONFIG);
    size_t len;
    char *text = qkv_cli_read_all(cmd, path, &len), *lines = malloc(len + 1), *q = lines, *kind = NULL;
    if (!text || !lines) return free(text), free(lines), text ? qkv_cli_report(cmd, "out of memory") : 1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        if (!strcmp(line, "kind")) kind = sp + 1;
        if (!strcmp(line, "kind") || !strcmp(line, "src_tokenizer") || !strcmp(line, "tgt_tokenizer")) continue;
        q += sprintf(q, "%s=%s\n", line, sp + 1);
    }
    *q = 0;
    int rc = 0;
    rf_field f[RF_COUNT(fields)]; /* older files may lack these */
    memcpy(f, fields, sizeof f);
    f[RANK].optional = f[DATA].optional = f[PRECISION].optional = 1;
    if (!kind || strcmp(kind, "translation"))
        rc = qkv_cli_report(cmd, "%s holds a checkpoint of kind '%s', not a translation model", dir,
                            kind ? kind : "(none)");
    else if (rf_read(path, lines, f, RF_COUNT(fields), c, sizeof *c))
        rc = qkv_cli_report(cmd, "%s", qkv_cli_last_error());
    free(text), free(lines);
    return rc;
}

/* The configuration in the checkpoint's metadata into c. */
static qkv_status meta_read(const char *ckpt, mt_config *c)
{
    char *cfg = NULL, *train = NULL, what[1200];
    qkv_status s = qkv_checkpoint_read_meta(ckpt, "translation.config", &cfg);
    if (!s) s = qkv_checkpoint_read_meta(ckpt, "translation.train", &train);
    snprintf(what, sizeof what, "%s: translation.config", ckpt);
    if (!s) s = rf_read(what, cfg, fields, N_CONFIG, c, sizeof *c);
    snprintf(what, sizeof what, "%s: translation.train", ckpt);
    if (!s) s = rf_read(what, train, fields + N_CONFIG, N_TRAIN, c, sizeof *c);
    if (!s) s = qkv_cli_checkpoint_precision(ckpt, "translation.precision", &c->precision);
    free(cfg), free(train);
    return s;
}

int mt_config_open(const char *cmd, const char *arg, char *dir, size_t nd, char *ckpt, size_t nk, mt_config *c)
{
    if (mt_config_dir(cmd, arg, dir, nd)) return 1;
    rf_run_checkpoint(arg, MT_CHECKPOINT, ckpt, nk);
    *c = (mt_config){.data = "data/translation"};
    char *kind = NULL, cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/%s", dir, MT_CONFIG);
    int old = access(cfg, F_OK) == 0;
    qkv_status s = access(ckpt, F_OK) == 0 ? qkv_checkpoint_read_meta(ckpt, "kind", &kind) : QKV_ERR_NOTFOUND;
    if (s == QKV_OK && strcmp(kind, "translation"))
        s = qkv_cli_fail(QKV_ERR_ARG, "%s holds a checkpoint of kind '%.40s', not a translation model", ckpt, kind);
    else if (s == QKV_OK)
        s = meta_read(ckpt, c);
    free(kind);
    if (s == QKV_ERR_NOTFOUND && old) return legacy_read(cmd, dir, c); /* a run of an older version */
    if (s == QKV_ERR_NOTFOUND)
        return qkv_cli_report(cmd, "%s has no %s (%s): not a model directory of `qkv train translation` (give "
                              "its --out directory, or the %s in it)", dir, MT_CONFIG, strerror(ENOENT),
                              MT_CHECKPOINT);
    return s ? qkv_cli_report(cmd, "%s", qkv_cli_last_error()) : 0;
}
