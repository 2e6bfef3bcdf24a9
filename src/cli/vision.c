/* vision.c: image classifiers for the qkv command (train_vision.c,
 * eval_vision.c, classify.c); vision.h says what each does. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cli/vision.h"

const char *const vision_kind_names[3] = {"vit", "cnn", "mlp"};
static const char *const pool_names[2] = {"cls", "mean"};
static const char *const pos_names[2] = {"learned", "sincos"};


/* ---- the configuration ------------------------------------------------------ */

/* vision.config in the run format (run_format.h): the first seven fields
 * for every kind, the rest for kind=vit only. */
static const rf_field config_fields[] = {
    RF_CHOICE(vision_config, kind, vision_kind_names, 3),
    RF_NUM(vision_config, channels, RF_I64, 1, 4),
    RF_NUM(vision_config, height, RF_I64, 1, 4096),
    RF_NUM(vision_config, width, RF_I64, 1, 4096),
    RF_NUM(vision_config, classes, RF_I64, 2, 100000),
    RF_NUM(vision_config, mean, RF_F32, -1e6, 1e6),
    RF_NUM(vision_config, std, RF_F32, 1e-30, 1e30),
    RF_NUM(vision_config, patch, RF_I64, 1, 4096),
    RF_NUM(vision_config, d_model, RF_I64, 1, 16384),
    RF_NUM(vision_config, layers, RF_I64, 1, 256),
    RF_NUM(vision_config, heads, RF_I64, 1, 16384),
    RF_NUM(vision_config, mlp_dim, RF_I64, 1, 65536),
    RF_CHOICE(vision_config, pool, pool_names, 2),
    RF_CHOICE(vision_config, pos, pos_names, 2)};
enum { BASE_FIELDS = 7 };

qkv_status vision_config_format(const vision_config *g, char *buf, size_t n)
{
    return rf_write(config_fields, g->kind == VISION_VIT ? RF_COUNT(config_fields) : BASE_FIELDS, g, buf, n);
}

static int pick(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* The one-line vision.config of older runs ("kind=vit image=1x28x28
 * classes=10 mean=... std=... patch=4 ..."): deprecated, read only. */
static qkv_status legacy_config_parse(const char *text, vision_config *g)
{
    char kind[8], pool[8], pos[8];
    long long c, h, w, k, p, d, l, nh, f;
    int used = 0;
    *g = (vision_config){0};
    int n = sscanf(text, "kind=%7s image=%lldx%lldx%lld classes=%lld mean=%f std=%f%n", kind, &c, &h, &w,
                   &k, &g->mean, &g->std, &used);
    int kd = n == 7 ? pick(kind, vision_kind_names, 3) : -1;
    if (kd < 0 || c < 1 || c > 4 || h < 1 || h > 4096 || w < 1 || w > 4096 || k < 2 || k > 100000 ||
        !(g->std > 0) || !(g->mean > -1e6 && g->mean < 1e6))
        return qkv_cli_fail(QKV_ERR_FORMAT, "vision.config '%.200s' is malformed", text);
    *g = (vision_config){.kind = (vision_kind)kd, .channels = c, .height = h, .width = w, .classes = k,
                         .mean = g->mean, .std = g->std};
    if (kd != VISION_VIT) return text[used] ? qkv_cli_fail(QKV_ERR_FORMAT, "vision.config '%.200s' is malformed", text)
                                            : QKV_OK;
    int u2 = 0;
    n = sscanf(text + used, " patch=%lld d_model=%lld layers=%lld heads=%lld mlp_dim=%lld pool=%7s pos=%7s%n",
               &p, &d, &l, &nh, &f, pool, pos, &u2);
    int pl = n == 7 ? pick(pool, pool_names, 2) : -1, ps = n == 7 ? pick(pos, pos_names, 2) : -1;
    if (pl < 0 || ps < 0 || text[used + u2] || p < 1 || p > h || p > w || d < 1 || d > 16384 || l < 1 ||
        l > 256 || nh < 1 || d % nh || f < 1 || f > 65536)
        return qkv_cli_fail(QKV_ERR_FORMAT, "vision.config '%.200s' is malformed", text);
    g->patch = p, g->d_model = d, g->layers = l, g->heads = nh, g->mlp_dim = f;
    g->pool = (qkv_vit_pool)pl, g->pos = ps ? QKV_VIT_POS_SINCOS : QKV_VIT_POS_LEARNED;
    return QKV_OK;
}

qkv_status vision_config_parse(const char *text, vision_config *g)
{
    if (!rf_is_lines(text)) return legacy_config_parse(text, g);
    vision_config v = {0};
    int vit = !strncmp(text, "kind=vit\n", 9);
    QKV_CLI_TRY(rf_read("vision.config", text, config_fields, vit ? RF_COUNT(config_fields) : BASE_FIELDS, &v,
                        sizeof v));
    if (vit && (v.patch > v.height || v.patch > v.width || v.d_model % v.heads))
        return qkv_cli_fail(QKV_ERR_FORMAT, "vision.config: patch %lld or d_model %lld does not fit (heads %lld)",
                            (long long)v.patch, (long long)v.d_model, (long long)v.heads);
    *g = v;
    return QKV_OK;
}

/* ---- the model ------------------------------------------------------------------- */

void vision_model_free(vision_model *m)
{
    if (!m) return;
    if (m->cfg.kind == VISION_VIT) qkv_vit_free(&m->vit);
    if (m->cfg.kind == VISION_CNN) qkv_cnn_free(&m->cnn);
    if (m->cfg.kind == VISION_MLP) qkv_mlp_free(&m->mlp);
    qkv_params_free(m->p);
    *m = (vision_model){0};
}

qkv_status vision_model_init(vision_model *m, const vision_config *g, qkv_rng *rng)
{
    *m = (vision_model){.cfg = *g};
    qkv_status s = qkv_params_new(&m->p);
    if (!s && g->kind == VISION_VIT) {
        qkv_vit_opts o = qkv_vit_opts_default(g->height, g->width, g->channels, g->patch, g->classes);
        o.d_model = g->d_model, o.num_layers = g->layers, o.nhead = g->heads, o.dim_feedforward = g->mlp_dim;
        o.pool = g->pool, o.pos = g->pos;
        s = qkv_vit_init(&m->vit, &o, m->p, "", rng);
    } else if (!s && g->kind == VISION_CNN) {
        qkv_cnn_opts o = qkv_cnn_opts_default();
        o.in_channels = g->channels, o.height = g->height, o.width = g->width, o.num_classes = g->classes;
        s = qkv_cnn_init(&m->cnn, &o, m->p, "", rng);
    } else if (!s) {
        qkv_mlp_opts o = qkv_mlp_opts_default();
        o.in_features = g->channels * g->height * g->width, o.num_classes = g->classes;
        s = qkv_mlp_init(&m->mlp, &o, m->p, "", rng);
    }
    if (s) {
        qkv_params_free(m->p);
        m->p = NULL;
    }
    return s;
}

qkv_status vision_model_load(vision_model *m, const char *path, char *path_out, size_t n)
{
    *m = (vision_model){0};
    char file[1200];
    rf_run_checkpoint(path, VISION_CKPT_NAME, file, sizeof file);
    if (path_out) snprintf(path_out, n, "%s", file);
    char *kind = NULL, *cfg = NULL;
    qkv_status s = qkv_checkpoint_read_meta(file, "kind", &kind);
    if (s == QKV_ERR_NOTFOUND)
        return qkv_cli_fail(s, "%s is a qkv checkpoint, but not of an image classifier (no kind)", file);
    if (s) return s;
    if (pick(kind, vision_kind_names, 3) < 0) {
        s = qkv_cli_fail(QKV_ERR_ARG, "%s holds a model of kind '%.40s', not an image classifier (vit, cnn, mlp)",
                        file, kind);
        free(kind);
        return s;
    }
    free(kind);
    s = qkv_checkpoint_read_meta(file, "vision.config", &cfg);
    if (s == QKV_ERR_NOTFOUND) s = qkv_cli_fail(s, "%s: metadata vision.config is missing", file);
    vision_config g;
    if (!s) s = vision_config_parse(cfg, &g);
    free(cfg);
    qkv_rng rng;
    qkv_rng_seed(&rng, 1);
    if (!s) s = vision_model_init(m, &g, &rng);
    if (!s) s = qkv_checkpoint_load(file, m->p, NULL, NULL, NULL);
    if (s) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", qkv_cli_last_error());
        vision_model_free(m);
        qkv_cli_fail(s, "%s", msg);
    }
    return s;
}

qkv_status vision_forward(qkv_ctx *c, const vision_model *m, qkv_tensor *images, qkv_tensor **logits)
{
    switch (m->cfg.kind) {
    case VISION_VIT: return qkv_vit_forward(c, &m->vit, images, logits);
    case VISION_CNN: return qkv_module_forward(c, (qkv_module *)&m->cnn.seq.base, images, logits);
    default: return qkv_module_forward(c, (qkv_module *)&m->mlp.seq.base, images, logits);
    }
}

/* *right gets the images of [lo, hi) of set classified right. */
static qkv_status count_right(qkv_ctx *c, const vision_model *m, const qkv_image_set *set, int64_t lo,
                              int64_t hi, int64_t batch, int64_t *right_out, int64_t *confusion)
{
    const vision_config *g = &m->cfg;
    int64_t per = g->channels * g->height * g->width, K = g->classes, right = 0;
    float *x = malloc((size_t)(batch * per) * sizeof *x);
    int64_t *idx = malloc((size_t)batch * sizeof *idx), *lab = malloc((size_t)batch * sizeof *lab);
    qkv_status s = x && idx && lab ? QKV_OK : qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    if (confusion) memset(confusion, 0, (size_t)(K * K) * sizeof *confusion);
    qkv_image_aug aug = {.mean = &g->mean, .std = &g->std};
    qkv_ctx_set_training(c, 0);
    qkv_ctx_set_grad(c, 0);
    for (int64_t b0 = lo; !s && b0 < hi; b0 += batch) {
        int64_t B = hi - b0 < batch ? hi - b0 : batch;
        for (int64_t i = 0; i < B; i++) idx[i] = b0 + i;
        qkv_ctx_reset(c);
        qkv_tensor *tx, *y;
        s = qkv_image_set_batch(set, idx, B, &aug, NULL, x, lab);
        if (!s) s = qkv_tensor_wrap(qkv_ctx_arena(c), x, 4, (int64_t[]){B, g->channels, g->height, g->width}, &tx);
        if (!s) s = vision_forward(c, m, tx, &y);
        for (int64_t i = 0; !s && i < B; i++) {
            const float *row = y->data + i * K;
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (row[k] > row[best]) best = k;
            right += best == lab[i];
            if (confusion && lab[i] >= 0 && lab[i] < K) confusion[lab[i] * K + best]++;
        }
    }
    qkv_ctx_set_grad(c, 1);
    qkv_ctx_set_training(c, 1);
    free(x), free(idx), free(lab);
    *right_out = right;
    return s;
}

qkv_status vision_evaluate(qkv_ctx *c, const vision_model *m, const qkv_image_set *set, int64_t batch,
                           double *accuracy, int64_t *confusion)
{
    int64_t right;
    QKV_CLI_TRY(count_right(c, m, set, 0, set->n, batch, &right, confusion));
    *accuracy = set->n ? (double)right / (double)set->n : 0;
    return QKV_OK;
}

qkv_status vision_evaluate_split(qkv_ctx *c, const vision_model *m, const qkv_image_set *set, int64_t batch,
                                 qkv_dist *d, double *accuracy)
{
    int64_t first, n, right = 0;
    qkv_dist_shard(d, set->n, &first, &n);
    qkv_status s = count_right(c, m, set, first, first + n, batch, &right, NULL);
    double counted = (double)right; /* exact: counts far below 2^53 */
    if (qkv_dist_size(d) > 1) {
        s = qkv_cli_dist_agree(d, s, "test accuracy");
        if (!s) s = qkv_dist_allreduce_f64(d, &counted, 1, QKV_DIST_SUM);
    }
    if (!s) *accuracy = set->n ? counted / (double)set->n : 0;
    return s;
}

void vision_data_dir(const char *ckpt, const char *data, char *dir, size_t n)
{
    char *train = NULL;
    snprintf(dir, n, "%s", data ? data : "data/fashion-mnist");
    if (!data && qkv_checkpoint_read_meta(ckpt, "vision.train", &train) == QKV_OK) {
        const char *d = strstr(train, rf_is_lines(train) ? "\ndata=" : " data="); /* older runs: one line */
        if (d) snprintf(dir, n, "%.*s", (int)strcspn(d + 6, "\n"), d + 6);
    }
    free(train);
}

qkv_status vision_load_set(const char *dir, int train, int64_t limit, qkv_image_set **out)
{
    QKV_CLI_TRY(qkv_fashion_mnist_load(dir, train, out));
    if (limit > 0 && limit < (*out)->n) (*out)->n = limit;
    return QKV_OK;
}
