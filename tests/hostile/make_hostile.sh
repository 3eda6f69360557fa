#!/bin/sh
# make_hostile.sh SETS_DIR OUT_DIR - writes five files that make libhdf5 1.10.8 (Debian 12's
# only HDF5) misbehave, from the committed fixtures, one byte changed in each: two it crashes
# on, two it reads past a heap buffer on without crashing, one it never returns from. For the
# isolation tests (tests/test_fixtures.c, fixture_cli suite) and, but the last, as seeds of
# `make fuzz` (tests/fuzz/README.md).
# Nothing binary is committed: they are made at test time into OUT_DIR.
#
#   hostile-h5aexists.h5  layout-gemma3.h5, byte 121029 0x00 -> 0xbd: a corrupt attribute
#                         message in layer02's object header; H5Aexists -> H5O__attr_exists
#                         -> H5O__msg_iterate_real reads past a heap buffer. Whether that read
#                         faults depends on the heap's layout (ASan always reports it; a plain
#                         build segfaults or reads garbage and fails the lookup).
#   hostile-h5aread.h5    torch-flex.h5, byte 2426 0x00 -> 0x95: a corrupt global-heap
#                         reference of t04_causal_window's variable-length `generator` string;
#                         H5Aread -> H5T__conv_vlen -> H5HG_read copies ~9.5 MB past its buffer
#                         (segfaults in a plain build; ASan: memcpy-param-overlap).
#   overread-h5hg.h5      torch-flex.h5, byte 2057 0x10 -> 0x02: the size of the global heap
#                         collection at 2048 (the file's variable-length strings) 4096 -> 512;
#                         its later objects now lie past the buffer libhdf5 reads it into, and
#                         H5Aread -> H5T__conv_vlen -> H5HG_read copies strings from past it
#                         (ASan: heap-buffer-overflow, a read). A plain build reads garbage and
#                         our validation refuses it ("attribute 'dtype' = ''"): no signal.
#   overread-h5o.h5       layout-gemma3.h5, byte 121030 0x08 -> 0x09: the dataspace size of
#                         layer02's `causal` attribute message 8 -> 9; H5Aexists ->
#                         H5O__attr_exists -> H5O__msg_iterate_real reads past the object
#                         header's buffer decoding it (ASan: heap-buffer-overflow, a read of 4).
#                         A plain build refuses it ("attribute 'causal' = 113"): no signal.
#   loop-h5hg.h5          torch-softcap.h5, byte 3136 0xc8 -> 0x00: the size of the global heap
#                         collection's free space (its last object, at 3128) 3016 -> 2816;
#                         H5Aread of the root's `schema` string -> H5T__conv_vlen -> H5HG_read
#                         -> H5HG__protect -> H5C_protect never returns (found by fuzz_file
#                         as timeouts on 2026-12-01, this byte by a search of one-byte changes).
#                         flexcheck's per-file child stops it (cli/isolate.h, fix_watch_hook).
#
# Each byte is checked before it is changed: a regenerated fixture set fails here, loudly,
# rather than quietly producing a file that no longer crashes anything.
set -eu
sets=$1
out=$2

# flip SRC OFFSET OLD NEW DEST (bytes as two hex digits)
flip() {
    cp "$1" "$5"
    have=$(od -An -tx1 -j "$2" -N1 "$5" | tr -d ' \n')
    if [ "$have" != "$3" ]; then
        echo "make_hostile.sh: $1: byte $2 is 0x$have, expected 0x$3 (fixture regenerated?)" >&2
        rm -f "$5"
        exit 1
    fi
    # shellcheck disable=SC2059 # the format is the octal escape of the byte
    printf "\\$(printf '%03o' "0x$4")" | dd of="$5" bs=1 seek="$2" conv=notrunc 2>/dev/null
    now=$(od -An -tx1 -j "$2" -N1 "$5" | tr -d ' \n')
    [ "$now" = "$4" ] || { echo "make_hostile.sh: $5: byte $2 not written" >&2; exit 1; }
}

flip "$sets/layout-gemma3.h5" 121029 00 bd "$out/hostile-h5aexists.h5"
flip "$sets/torch-flex.h5" 2426 00 95 "$out/hostile-h5aread.h5"
flip "$sets/torch-flex.h5" 2057 10 02 "$out/overread-h5hg.h5"
flip "$sets/layout-gemma3.h5" 121030 08 09 "$out/overread-h5o.h5"
flip "$sets/torch-softcap.h5" 3136 c8 00 "$out/loop-h5hg.h5"
