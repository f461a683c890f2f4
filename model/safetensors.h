/* safetensors.h — the safetensors file format (Hugging Face), written and read exactly:
 *
 *   u64 little-endian N | N bytes of JSON header, padded with spaces to a multiple of 8
 *   | the byte buffer
 *
 * The header is one JSON object: per tensor "name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]} with offsets relative to the byte buffer, and optionally
 * "__metadata__": {string: string}. Tensors are row-major, little-endian.
 *
 * The reader checks everything the format's rules say (and never trusts a length from
 * the file): N bounded by the file size and 100 MB, the header valid JSON of that shape,
 * known dtypes, shapes whose element count times the dtype size is the offsets' span,
 * offsets in range, and the buffer wholly covered by the tensors with no holes or
 * overlaps (the rule that stops polyglot files). Anything else: STATUS_EMALFORMED.
 *
 * Not for: tensor names or what a model means by them (hf_model.h). */
#ifndef SWARMTRAIN_SAFETENSORS_H
#define SWARMTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_DIMS 8
/* The reader refuses headers larger than this (the reference implementation's limit). */
#define SAFETENSORS_MAX_HEADER (100u * 1000 * 1000)

typedef enum {
    SAFETENSORS_F32,
    SAFETENSORS_BF16,
    SAFETENSORS_F16,
    SAFETENSORS_F64,
    SAFETENSORS_I64,
    SAFETENSORS_I32,
    SAFETENSORS_I16,
    SAFETENSORS_I8,
    SAFETENSORS_U8,
    SAFETENSORS_BOOL,
    SAFETENSORS_NDTYPES
} safetensors_dtype_t;

/* "F32", "BF16", ...; NULL for an unknown value. */
const char *safetensors_dtype_name(int dtype);
/* Bytes per element; 0 for an unknown value. */
size_t safetensors_dtype_size(int dtype);
/* The dtype called name, or -1. */
int safetensors_dtype_by_name(const char *name);

/* One tensor. For the writer, data is float32 (numel floats) whatever the file's dtype;
 * for the reader, data points into the file's bytes (of `bytes` bytes, in dtype). */
typedef struct {
    const char *name;
    int dtype;
    int ndim; /* 0 .. SAFETENSORS_MAX_DIMS; 0 is a scalar */
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const void *data;
    size_t bytes;
    size_t offset; /* reader: begin of its span in the byte buffer */
} safetensors_tensor_t;

/* Writes n float32 tensors to path as `dtype` (SAFETENSORS_F32 or SAFETENSORS_BF16, which
 * rounds to nearest even), in the order given, with nmeta "__metadata__" pairs meta[2i] :
 * meta[2i+1] (nmeta 0: no metadata). Writes path.tmp and renames it over path, so path is
 * either the old file or the whole new one. 0, or STATUS_EINVAL (bad name, dtype, shape or
 * duplicate), STATUS_ENOMEM, STATUS_EIO with err. */
int safetensors_write(const char *path, const safetensors_tensor_t *t, int n, int dtype,
                      const char *const *meta, int nmeta, char *err)
    __attribute__((warn_unused_result));

typedef struct safetensors safetensors_t;

/* Reads and checks the whole file. Caller owns the result; NULL with err on failure:
 * STATUS_EIO (cannot read), STATUS_EMALFORMED (not a valid safetensors file), STATUS_ENOMEM. */
safetensors_t *safetensors_open(const char *path, char *err);
/* NULL-safe; sets *st to NULL. */
void safetensors_close(safetensors_t **st);

/* Length of the JSON header (the file's first u64). */
uint64_t safetensors_header_len(const safetensors_t *st);
int safetensors_count(const safetensors_t *st);
/* The i-th tensor in the order of the byte buffer; NULL when out of range. */
const safetensors_tensor_t *safetensors_at(const safetensors_t *st, int i);
/* The tensor called name, or NULL. */
const safetensors_tensor_t *safetensors_find(const safetensors_t *st, const char *name);
/* The metadata value for key, or NULL. */
const char *safetensors_metadata(const safetensors_t *st, const char *key);

/* Converts tensor `name` (F32, BF16 or F16) to numel floats in out. STATUS_ENOTFOUND when
 * there is no such tensor, STATUS_EINVAL when its element count is not numel or its dtype
 * is not a float type. */
int safetensors_read_f32(const safetensors_t *st, const char *name, float *out, size_t numel,
                         char *err);

/* bfloat16 <-> float32; to-bf16 rounds to nearest even and keeps NaN a NaN. */
uint16_t safetensors_f32_to_bf16(float x);
float safetensors_bf16_to_f32(uint16_t h);

#endif
