/* qkv/image.h: image data: idx files (MNIST's format), image sets with
 * batches, shuffles and augmentation, Fashion-MNIST, PNG images
 * (src/data/idx.c, images.c, augment.c, png.c; docs/data.md). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_IMAGE_H
#define QKV_IMAGE_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- idx files ---------------------------------------------------------- */

/* The idx format (LeCun's MNIST page): a 4-byte magic 0 0 TYPE NDIM, NDIM
 * big-endian 32-bit sizes, then the elements, big-endian, row-major. The
 * type codes it defines: */
typedef enum {
    QKV_IDX_U8 = 0x08,  /* unsigned byte (MNIST's images and labels) */
    QKV_IDX_I8 = 0x09,  /* signed byte */
    QKV_IDX_I16 = 0x0B, /* short (2 bytes) */
    QKV_IDX_I32 = 0x0C, /* int (4 bytes) */
    QKV_IDX_F32 = 0x0D, /* float (4 bytes) */
    QKV_IDX_F64 = 0x0E  /* double (8 bytes) */
} qkv_idx_type;

typedef struct qkv_idx qkv_idx;

/* Reads an idx file, plain or gzip'd (told apart by gzip's magic bytes,
 * not the name; concatenated gzip members are one stream, as gunzip reads
 * them). Any NDIM from 1 to 255; the element count must not overflow and
 * must match the bytes present exactly. A short, long or corrupt file is
 * QKV_ERR_FORMAT with a message naming path. */
QKV_API qkv_status qkv_idx_read(const char *path, qkv_idx **out);
/* The same from bytes in memory; name is used in messages. */
QKV_API qkv_status qkv_idx_parse(const void *bytes, size_t n, const char *name, qkv_idx **out);
QKV_API void qkv_idx_free(qkv_idx *x);

QKV_API qkv_idx_type qkv_idx_type_of(const qkv_idx *x);
QKV_API int qkv_idx_ndim(const qkv_idx *x);
QKV_API int64_t qkv_idx_dim(const qkv_idx *x, int d); /* -1 out of range */
QKV_API int64_t qkv_idx_numel(const qkv_idx *x);
/* The n = numel elements converted to float (doubles rounded) / int64
 * (integer types only: a float file is QKV_ERR_DTYPE). */
QKV_API qkv_status qkv_idx_read_f32(const qkv_idx *x, float *dst, int64_t n);
QKV_API qkv_status qkv_idx_read_i64(const qkv_idx *x, int64_t *dst, int64_t n);

/* ---- image sets ------------------------------------------------------- */

/* n images (n,C,H,W) as F32 in [0,1], each byte v read as v / 255.0f,
 * PyTorch's transforms.ToTensor() scaling, and their labels. */
typedef struct {
    int64_t n, channels, height, width;
    float *images;   /* (n,C,H,W) */
    int64_t *labels; /* (n), each in [0, classes) */
    int64_t classes; /* 1 + the largest label */
} qkv_image_set;

/* Images from an idx file of unsigned bytes (n,H,W) -> (n,1,H,W), labels
 * from an idx file of unsigned bytes (n); the counts must agree. */
QKV_API qkv_status qkv_image_set_load(const char *images_path, const char *labels_path,
                                      qkv_image_set **out);
/* Fashion-MNIST's training (train=1, 60000 images) or test (train=0,
 * 10000) split from dir (data/fashion-mnist from tools/get_data.sh
 * fashion-mnist), DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. */
QKV_API qkv_status qkv_fashion_mnist_load(const char *dir, int train, qkv_image_set **out);
QKV_API void qkv_image_set_free(qkv_image_set *s);
/* Fashion-MNIST's class names ("T-shirt/top", ..., "Ankle boot"); NULL for
 * a label outside [0, 10). */
QKV_API const char *qkv_fashion_mnist_class(int64_t label);

/* Each channel's mean and standard deviation over the set (population:
 * divided by n*H*W, computed in double), for transforms.Normalize. */
QKV_API qkv_status qkv_image_set_stats(const qkv_image_set *s, float *mean, float *std);

/* What a batch gets, in torchvision's order: RandomCrop((H,W),
 * padding=crop_padding) with zero fill, then RandomHorizontalFlip(flip_p),
 * then Normalize(mean, std) (per channel). The default {0} does none. */
typedef struct {
    int crop_padding;        /* 0: no crop */
    float flip_p;            /* 0: no flip */
    const float *mean, *std; /* C values each, or NULL: no normalisation */
} qkv_image_aug;

/* Gathers images index[0..n) of s into images (n,C,H,W) and labels (n)
 * (either may be NULL), then applies aug (NULL: none), drawing from r
 * (needed when aug crops or flips; the same seed gives the same batch). */
QKV_API qkv_status qkv_image_set_batch(const qkv_image_set *s, const int64_t *index, int64_t n,
                                       const qkv_image_aug *aug, qkv_rng *r, float *images,
                                       int64_t *labels);
/* A seeded Fisher-Yates shuffle of index[0..n) (fill it with 0..n-1 for
 * an epoch's order). */
QKV_API qkv_status qkv_shuffle_i64(qkv_rng *r, int64_t *index, int64_t n);

/* ---- augmentation, on a batch x (n,C,H,W) in place ---------------------- */

/* RandomCrop((H,W), padding=p): each image is padded with p zeros on every
 * side and an H x W window taken at offsets (top, left), each drawn
 * uniformly in [0, 2p] (top first), so out[y][x] = in[y+top-p][x+left-p]
 * or 0 outside. */
QKV_API qkv_status qkv_image_random_crop(qkv_rng *r, float *x, int64_t n, int64_t c, int64_t h,
                                         int64_t w, int p);
/* RandomHorizontalFlip(p): each image is mirrored (out[y][x] =
 * in[y][W-1-x]) when a uniform draw in [0,1) is < p. */
QKV_API qkv_status qkv_image_random_hflip(qkv_rng *r, float *x, int64_t n, int64_t c, int64_t h,
                                          int64_t w, float p);
/* Normalize(mean, std): x = (x - mean[ch]) / std[ch]; std must be > 0. */
QKV_API qkv_status qkv_image_normalize(float *x, int64_t n, int64_t c, int64_t h, int64_t w,
                                       const float *mean, const float *std);

/* ---- PNG images (libpng) ----------------------------------------------- */

/* Reads a PNG into *pixels, a malloc'd (C,H,W) F32 array in [0,1] (free()
 * it): grey C=1, grey+alpha 2, RGB 3, RGBA 4; palette images become RGB,
 * or RGBA when they have transparency (tRNS, which becomes an alpha
 * channel for grey and RGB images too); bit depths 1-16 are scaled by
 * their maximum (v / (2^depth - 1)). No gamma correction (as PIL). A
 * missing, truncated or corrupt file is an error naming path. */
QKV_API qkv_status qkv_png_read(const char *path, float **pixels, int64_t *c, int64_t *h,
                                int64_t *w);
/* The same from a whole PNG file's n bytes in memory; name is used in
 * messages. A header whose pixels cannot come from n bytes of deflate data
 * (at most 1032:1) is refused before anything is allocated for them. */
QKV_API qkv_status qkv_png_read_mem(const void *bytes, size_t n, const char *name, float **pixels,
                                    int64_t *c, int64_t *h, int64_t *w);

/* What qkv_image_fit did (bits of *changes). */
enum { QKV_IMAGE_CONVERTED = 1, QKV_IMAGE_RESIZED = 2 };

/* Converts src (sc,sh,sw) to a model's input dst (dc,dh,dw), dc 1 or 3:
 *  - channels: alpha is dropped (as PIL's convert); to grey, RGB becomes
 *    L = 0.299 R + 0.587 G + 0.114 B (ITU-R 601-2 luma, PIL's convert("L"),
 *    kept in float); to RGB, grey is repeated;
 *  - size: bilinear, as F.interpolate(mode="bilinear", align_corners=False,
 *    antialias=False).
 * *changes (may be NULL) gets QKV_IMAGE_CONVERTED and/or QKV_IMAGE_RESIZED
 * when they happened, so that the caller can say so. */
QKV_API qkv_status qkv_image_fit(const float *src, int64_t sc, int64_t sh, int64_t sw, float *dst,
                                 int64_t dc, int64_t dh, int64_t dw, unsigned *changes);
/* The bilinear resize alone, per channel: src (c,sh,sw) -> dst (c,dh,dw). */
QKV_API qkv_status qkv_image_resize_bilinear(const float *src, int64_t c, int64_t sh, int64_t sw,
                                             float *dst, int64_t dh, int64_t dw);

#ifdef __cplusplus
}
#endif
#endif
