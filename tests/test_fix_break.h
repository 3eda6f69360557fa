/*
 * test_fix_break.h - breaking a fixture file through the plain HDF5 API, and what the reader
 * must then say: the helpers tests/test_fixtures.c and tests/test_fix_xterms.c share. A test
 * writes a valid file with our writer, breaks one thing (a link deleted, a dataset replaced, an
 * attribute rewritten) and expects the reader to reject it with one line naming the file and
 * every given part, leaving the file untouched.
 */
#ifndef FLEXCHECK_TEST_FIX_BREAK_H
#define FLEXCHECK_TEST_FIX_BREAK_H

#include <criterion/criterion.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fixtures/fix.h"

#if defined(__GNUC__)
#define TFB_UNUSED __attribute__((unused))
#else
#define TFB_UNUSED
#endif

TFB_UNUSED
static hid_t open_rw(const char *p)
{
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0, "open %s", p);
    return f;
}

TFB_UNUSED
static void del(hid_t f, const char *obj)
{
    cr_assert(H5Ldelete(f, obj, H5P_DEFAULT) >= 0, "delete %s", obj);
}

/* Replaces (or creates) dataset obj with the given file type, shape and data. */
TFB_UNUSED
static void put_ds(hid_t f, const char *obj, hid_t ftype, hid_t mtype, int rank,
                   const hsize_t *dims, const void *buf)
{
    if (H5Lexists(f, obj, H5P_DEFAULT) > 0)
        del(f, obj);
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(f, obj, ftype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(d >= 0, "create %s", obj);
    if (buf)
        cr_assert(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "write %s", obj);
    H5Dclose(d);
    H5Sclose(s);
}

TFB_UNUSED
static void put_f32(hid_t f, const char *obj, int rank, const hsize_t *dims, const float *buf)
{
    put_ds(f, obj, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rank, dims, buf);
}

TFB_UNUSED
static void put_i32(hid_t f, const char *obj, int rank, const hsize_t *dims, const int32_t *buf)
{
    put_ds(f, obj, H5T_STD_I32LE, H5T_NATIVE_INT32, rank, dims, buf);
}

TFB_UNUSED
static void drop_attr(hid_t f, const char *obj, const char *name)
{
    if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0)
        cr_assert(H5Adelete_by_name(f, obj, name, H5P_DEFAULT) >= 0, "delete %s@%s", obj, name);
}

TFB_UNUSED
static void put_attr_int(hid_t f, const char *obj, const char *name, long long v)
{
    drop_attr(f, obj, name);
    cr_assert(H5LTset_attribute_long_long(f, obj, name, &v, 1) >= 0, "attr %s", name);
}

TFB_UNUSED
static void put_attr_double(hid_t f, const char *obj, const char *name, double v)
{
    drop_attr(f, obj, name);
    cr_assert(H5LTset_attribute_double(f, obj, name, &v, 1) >= 0, "attr %s", name);
}

TFB_UNUSED
static void put_attr_str(hid_t f, const char *obj, const char *name, const char *v)
{
    drop_attr(f, obj, name);
    cr_assert(H5LTset_attribute_string(f, obj, name, v) >= 0, "attr %s", name);
}

/* Opens p and validates every case: FC_OK, or the first failure in err. */
TFB_UNUSED
static fc_status open_validate(const char *p, fc_err *err)
{
    fix_file f;
    fc_status st = fix_open(p, &f, err);
    if (!st) {
        st = fix_validate(&f, err);
        fix_close(&f);
    }
    return st;
}

/* Opening and validating must fail with a message holding the path and every `parts`. */
TFB_UNUSED
static void expect_rejected_(const char *p, const char *const *parts)
{
    struct stat before, after;
    cr_assert_eq(stat(p, &before), 0);
    fc_err err = {{0}};
    fc_status st = open_validate(p, &err);
    cr_assert_neq(st, FC_OK, "%s was accepted; expected a message with '%s'", p, parts[0]);
    cr_assert(strstr(err.msg, p), "message names the file: %s", err.msg);
    for (int i = 0; parts[i]; i++)
        cr_assert(strstr(err.msg, parts[i]), "message should contain '%s': %s", parts[i],
                  err.msg);
    cr_assert(!strchr(err.msg, '\n'), "one line: %s", err.msg);
    cr_assert_eq(stat(p, &after), 0);
    cr_assert(before.st_size == after.st_size && before.st_mtime == after.st_mtime,
              "a rejected file is left untouched: %s", p);
}
#define expect_rejected(p, ...) expect_rejected_((p), (const char *const[]){__VA_ARGS__, NULL})

TFB_UNUSED
static void expect_accepted(const char *p)
{
    fc_err err = {{0}};
    fc_status st = open_validate(p, &err);
    cr_assert_eq(st, FC_OK, "%s should be accepted: %s", p, err.msg);
}

/* A broken file and what the reader must say of it: the file (name.h5) written valid, brk
 * applied to it through the HDF5 API, then refused with every part in the message. */
typedef struct fix_refusal {
    const char *name;
    void (*brk)(hid_t);
    const char *parts[3];
} fix_refusal;

/* Each of the n refusals, on a file `write(name.h5)` makes valid. */
TFB_UNUSED
static void expect_refusals(const char *(*write)(const char *name), const fix_refusal *r,
                            size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.h5", r[i].name); /* the case in every message */
        const char *p = write(name);
        hid_t f = open_rw(p);
        r[i].brk(f);
        H5Fclose(f);
        const char *all[4] = {r[i].parts[0], r[i].parts[1], r[i].parts[2], NULL};
        expect_rejected_(p, all);
    }
}

/* Opens p and reads its first case, both required to succeed. */
TFB_UNUSED
static void read_only_case(const char *p, fix_file *f, fix_case *c)
{
    fc_err err;
    cr_assert_eq(fix_open(p, f, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(f, 0, c, &err), FC_OK, "%s", err.msg);
}

#endif
