/* params.c - the mask parameter table and what is driven by it (params.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "masks/params.h"

const mask_param_info mask_param_table[MASK_NPARAMS] = {
#define MASK_INFO(field, name, opt, label, tag, off_tag, max, help)                            \
    {name, opt, label, tag, off_tag, help, max, offsetof(mask_params, field)},
    MASK_PARAMS(MASK_INFO)
#undef MASK_INFO
};

int32_t mask_param_get(const mask_params *m, int i)
{
    int32_t v;
    memcpy(&v, (const char *)m + mask_param_table[i].offset, sizeof v);
    return v;
}

void mask_param_set(mask_params *m, int i, int32_t v)
{
    memcpy((char *)m + mask_param_table[i].offset, &v, sizeof v);
}

int mask_param_is_flag(int i)
{
    return mask_param_table[i].max == 1;
}

fc_status mask_params_check(const mask_params *m, fc_err *err)
{
    for (int i = 0; i < MASK_NPARAMS; i++) {
        int32_t v = mask_param_get(m, i);
        if (v < 0 || v > mask_param_table[i].max)
            return mask_param_is_flag(i)
                       ? fc_errf(err, FC_EINVAL, "%s = %d: must be 0 or 1",
                                 mask_param_table[i].name, (int)v)
                       : fc_errf(err, FC_EINVAL, "%s = %d: must be >= 0 (0 = off)",
                                 mask_param_table[i].name, (int)v);
    }
    if (m->reserved != 0)
        return fc_errf(err, FC_EINVAL, "mask_params.reserved = %d: must be 0", (int)m->reserved);
    return FC_OK;
}

/* Appends to buf at *o, never past cap. */
static void put(char *buf, size_t cap, size_t *o, const char *fmt, ...)
{
    if (*o >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *o, cap - *o, fmt, ap);
    va_end(ap);
    if (k > 0)
        *o += (size_t)k;
}

void mask_params_text(char *buf, size_t cap, const mask_params *m, mask_text style)
{
    size_t o = 0;
    int any = 0;
    if (!cap)
        return;
    buf[0] = 0;
    for (int i = 0; i < MASK_NPARAMS; i++) {
        const mask_param_info *p = &mask_param_table[i];
        int32_t v = mask_param_get(m, i);
        any |= v != 0;
        switch (style) {
        case MASK_TEXT_LABEL_EQ:
            put(buf, cap, &o, "%s%s=%d", i ? " " : "", p->label, (int)v);
            break;
        case MASK_TEXT_LABEL:
            put(buf, cap, &o, "%s%s %d", i ? " " : "", p->label, (int)v);
            break;
        case MASK_TEXT_NAME:
            put(buf, cap, &o, "%s%s %d", i ? ", " : "", p->name, (int)v);
            break;
        case MASK_TEXT_JSON:
            put(buf, cap, &o, "%s\"%s\":%d", i ? "," : "", p->name, (int)v);
            break;
        case MASK_TEXT_ID:
            if (mask_param_is_flag(i))
                put(buf, cap, &o, "%s", v ? p->tag : p->off_tag);
            else if (v)
                put(buf, cap, &o, "%s%d", p->tag, (int)v);
            break;
        }
    }
    if (style == MASK_TEXT_ID && !any)
        snprintf(buf, cap, "none");
}
