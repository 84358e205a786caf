/*
 * abi_check.c - checks the host's reading of device trace records
 * (patch_abi.h) against the wire's own encoder (gpuprof_wire.h): random
 * warp accesses are laid out as the device patch lays them out (the same
 * decisions, written here in C), converted with gp_dev_len and
 * gp_dev_to_wire, and compared byte for byte with what
 * gpw_access_record_compact (or gpw_access_record, plain) writes for the
 * same lanes. Runs without a GPU: `cc -O2 -o abi_check abi_check.c &&
 * ./abi_check` from this folder; gpu-check's selftest phase runs it too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpuprof_wire.h"
#include "../patch_abi.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The device's layout of one record (gpuprof_patch.cu's gp_emit). */
static uint32_t dev_layout(uint8_t *rec, int encode, uint64_t pc, uint32_t active, uint32_t size,
                           const uint64_t *addrs, const uint8_t *vals) {
    uint32_t enc = 0, len = 24, n = (uint32_t)__builtin_popcount(active), lane, rank;
    uint32_t l0 = (uint32_t)__builtin_ctz(active), rest = active & (active - 1);
    uint64_t base = 0, step = 0;
    if (size) {
        if (encode) {
            int ok = 1, aff = 1, uni = 1;
            if (rest) {
                uint32_t l1 = (uint32_t)__builtin_ctz(rest);
                int64_t dl = (int64_t)l1 - (int64_t)l0, d = (int64_t)(addrs[l1] - addrs[l0]);
                ok = d % dl == 0;
                step = (uint64_t)(d / dl);
            }
            base = addrs[l0] - step * l0;
            for (lane = 0; lane < 32; lane++) {
                if (!(active >> lane & 1)) continue;
                if (!(ok && addrs[lane] == base + step * lane)) aff = 0;
                if (memcmp(vals + lane * size, vals + l0 * size, size)) uni = 0;
            }
            enc = (aff ? GP_ENC_AFFINE : 0) | (uni ? GP_ENC_UNIFORM : 0);
        }
        len += (enc & GP_ENC_AFFINE) ? 16 : 8 * n;
        len += (enc & GP_ENC_UNIFORM) ? size : n * size;
        len = (len + 7) & ~7u;
    }
    memset(rec, 0xee, len); /* padding the device leaves unwritten */
    memcpy(rec, &pc, 8);
    uint64_t h1 = 7 | (uint64_t)3 << 32 | (uint64_t)1 << 48 | (uint64_t)1 << 56;
    uint64_t h2 = (uint64_t)active | (uint64_t)size << 32 | (uint64_t)enc << 40 | (uint64_t)len << 48;
    memcpy(rec + 8, &h1, 8);
    memcpy(rec + 16, &h2, 8);
    if (!size) return len;
    uint8_t *body = rec + 24;
    if (enc & GP_ENC_AFFINE) {
        memcpy(body, &base, 8);
        memcpy(body + 8, &step, 8);
        body += 16;
    } else {
        for (lane = 0, rank = 0; lane < 32; lane++)
            if (active >> lane & 1) memcpy(body + 8 * rank++, &addrs[lane], 8);
        body += 8 * n;
    }
    if (enc & GP_ENC_UNIFORM)
        memcpy(body, vals + l0 * size, size);
    else
        for (lane = 0, rank = 0; lane < 32; lane++)
            if (active >> lane & 1) memcpy(body + size * rank++, vals + lane * size, size);
    return len;
}

int main(void) {
    static const uint32_t sizes[] = {0, 1, 2, 4, 8, 16};
    uint8_t rec[GP_REC_MAX + 64], got[GP_REC_MAX + 64];
    int fails = 0, i;
    for (i = 0; i < 200000; i++) {
        uint32_t size = sizes[next() % 6], active, lane;
        int encode = (next() % 4) != 0;
        uint64_t addrs[32], pc = next();
        uint8_t vals[32 * 16];
        switch (next() % 4) {
        case 0: active = 0xffffffffu; break;
        case 1: active = 1u << (next() % 32); break;
        default: active = (uint32_t)next(); break;
        }
        if (!active) active = 1;
        uint64_t a0 = next() & ~15ull, st = (next() % 3 == 0) ? 0 : size * (1 + next() % 3);
        int shape = (int)(next() % 3), vshape = (int)(next() % 3);
        for (lane = 0; lane < 32; lane++) {
            addrs[lane] = shape == 0 ? a0 + st * lane : shape == 1 ? next() : a0 - st * lane;
            if (shape == 0 && next() % 50 == 0) addrs[lane] += 4; /* one lane off the line */
            uint64_t v[2] = {vshape == 0 ? 42 : next(), vshape == 2 ? next() : 0};
            memcpy(vals + lane * size, v, size);
        }
        uint32_t len = dev_layout(rec, encode, pc, active, size, addrs, vals);
        if (gp_dev_len(rec, len) != len) {
            printf("record %d: gp_dev_len %u, want %u\n", i, gp_dev_len(rec, len), len);
            fails++;
            continue;
        }
        uint32_t wl = gp_dev_to_wire(got, rec, len);
        gpw_buf b;
        gpw_buf_init(&b);
        if (encode)
            gpw_access_record_compact(&b, pc, 7, 3, 1, 1, active, (uint8_t)size, addrs, vals);
        else
            gpw_access_record(&b, pc, 7, 3, 1, 1, active, (uint8_t)size, addrs, vals);
        if (b.len != wl || memcmp(b.data, got, wl)) {
            printf("record %d (size %u, active %08x, encode %d): wire differs (%zu bytes against %u)\n", i, size, active,
                   encode, b.len, wl);
            fails++;
        }
        gpw_buf_free(&b);
        if (fails > 10) break;
    }
    /* A truncated or altered header is refused, not read past. */
    {
        uint64_t addrs[32] = {0};
        uint8_t vals[32 * 16] = {0};
        uint32_t len = dev_layout(rec, 1, 1, 0xffffffffu, 4, addrs, vals);
        if (gp_dev_len(rec, len - 8) != 0) printf("truncated record accepted\n"), fails++;
        rec[22] = 0xff;
        if (gp_dev_len(rec, GP_REC_MAX) != 0) printf("wrong length accepted\n"), fails++;
    }
    printf("abi_check: %s\n", fails ? "FAIL" : "ok");
    return fails != 0;
}
