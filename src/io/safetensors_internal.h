/* safetensors_internal.h: the in-memory entry point of the safetensors
 * reader, shared by qkv_safetensors_open and the fuzz target. */
#ifndef QKV_IO_SAFETENSORS_INTERNAL_H
#define QKV_IO_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "qkv.h"

/* Parses and strictly validates a whole safetensors file held in buf[0, len)
 * (copied; buf may be freed afterwards). label names the source in error
 * messages, as the path does for qkv_safetensors_open. */
qkv_status qkv_safetensors_parse(const uint8_t *buf, size_t len, const char *label,
                                 qkv_safetensors **out);

#endif
