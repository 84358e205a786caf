/*
 * gprdump - validate and summarise a gpuprof raw record stream (docs/wire.md).
 *
 * Used by scripts/gpu-check on the GPU machine (which has no Go) to check the
 * injection library's output; the project's real decoder is collector/rawstream.
 *
 *   gprdump [options] FILE.gpr
 *     (default)       validate and print a summary; exit 1 on a malformed stream
 *     --launches      one line per launch (function, grid, records, duration)
 *     --stats         per function: accesses by kind and GVProf temporal
 *                     redundancy (same thread, address and value as that
 *                     thread's previous load/store of the address); per PC:
 *                     lane accesses, distinct values, most frequent value
 *     --pcs           distinct (function, pc offset, space, op) of ACCESS records
 *     --stalls        per function: PC samples by stall reason
 *     --instr         per function: SASS instruction counts (hybrid)
 *     --cubins DIR    write every cubin carried by MODULE frames to DIR/<key>.cubin
 *   gprdump --fnv FILE   print the FNV-1a 64 of a file (the MODULE content key)
 *
 * Pure C99 plus the project's wire header.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpuprof_wire.h"

/* ------------------------------------------------------------------ */
/* Input                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t n;
    size_t pos;
    int err;
} rd_t;

static int need(rd_t *r, size_t k) {
    if (r->err || r->n - r->pos < k) {
        r->err = 1;
        return 0;
    }
    return 1;
}
static uint8_t u8(rd_t *r) { return need(r, 1) ? r->p[r->pos++] : 0; }
static uint16_t u16(rd_t *r) {
    uint16_t v = need(r, 2) ? gpw_load_u16(r->p + r->pos) : 0;
    if (!r->err) r->pos += 2;
    return v;
}
static uint32_t u32(rd_t *r) {
    uint32_t v = need(r, 4) ? gpw_load_u32(r->p + r->pos) : 0;
    if (!r->err) r->pos += 4;
    return v;
}
static uint64_t u64(rd_t *r) {
    uint64_t v = need(r, 8) ? gpw_load_u64(r->p + r->pos) : 0;
    if (!r->err) r->pos += 8;
    return v;
}
static const uint8_t *bytes(rd_t *r, size_t k) {
    const uint8_t *b;
    if (!need(r, k)) return NULL;
    b = r->p + r->pos;
    r->pos += k;
    return b;
}
/* Returns a malloc'd NUL-terminated copy. */
static char *str(rd_t *r) {
    uint16_t n = u16(r);
    const uint8_t *b = bytes(r, n);
    char *s = (char *)malloc((size_t)n + 1);
    if (!s) exit(3);
    if (b) memcpy(s, b, n);
    s[b ? n : 0] = 0;
    return s;
}

/* ------------------------------------------------------------------ */
/* Hash table: (a, b, c) -> (x, y, z)                                 */
/* ------------------------------------------------------------------ */

typedef struct {
    uint64_t a, b, c, x, y, z;
    int used;
} ent_t;

typedef struct {
    ent_t *e;
    size_t cap, len;
} ht_t;

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static ent_t *ht_get(ht_t *t, uint64_t a, uint64_t b, uint64_t c, int create);

static void ht_grow(ht_t *t) {
    size_t i, oc = t->cap;
    ent_t *old = t->e;
    t->cap = oc ? oc * 2 : 1024;
    t->e = (ent_t *)calloc(t->cap, sizeof(ent_t));
    if (!t->e) {
        fprintf(stderr, "out of memory\n");
        exit(3);
    }
    t->len = 0;
    for (i = 0; i < oc; i++)
        if (old[i].used) {
            ent_t *n = ht_get(t, old[i].a, old[i].b, old[i].c, 1);
            n->x = old[i].x;
            n->y = old[i].y;
            n->z = old[i].z;
        }
    free(old);
}

static ent_t *ht_get(ht_t *t, uint64_t a, uint64_t b, uint64_t c, int create) {
    size_t i;
    if (create && (t->len + 1) * 2 > t->cap) ht_grow(t);
    if (!t->cap) return NULL;
    i = (size_t)(mix(a ^ mix(b ^ mix(c))) & (t->cap - 1));
    for (;;) {
        ent_t *e = &t->e[i];
        if (!e->used) {
            if (!create) return NULL;
            e->used = 1;
            e->a = a;
            e->b = b;
            e->c = c;
            e->x = e->y = e->z = 0;
            t->len++;
            return e;
        }
        if (e->a == a && e->b == b && e->c == c) return e;
        i = (i + 1) & (t->cap - 1);
    }
}

/* ------------------------------------------------------------------ */
/* Model                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    uint32_t id;
    uint64_t module;
    uint64_t pc;
    uint32_t size;
    char *name;
    /* stats */
    uint64_t lanes[4][3]; /* [space][0 read, 1 write, 2 atomic] */
    uint64_t tr_reads, tr_read_red, tr_writes, tr_write_red;
    uint64_t samples, *reason_samples;
    uint64_t inst, thread_inst;
    uint64_t launches;
} func_t;

static func_t *funcs;
static size_t nfuncs, capfuncs;
static func_t **by_pc;
static size_t nby_pc;

static func_t *func_by_id(uint32_t id) {
    size_t i;
    for (i = 0; i < nfuncs; i++)
        if (funcs[i].id == id) return &funcs[i];
    return NULL;
}

static int cmp_pc(const void *a, const void *b) {
    const func_t *x = *(func_t *const *)a, *y = *(func_t *const *)b;
    return x->pc < y->pc ? -1 : x->pc > y->pc;
}

static func_t *func_by_pc(uint64_t pc) {
    size_t lo = 0, hi = nby_pc;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (by_pc[mid]->pc <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return NULL;
    if (pc < by_pc[lo - 1]->pc + (by_pc[lo - 1]->size ? by_pc[lo - 1]->size : 1u << 30)) return by_pc[lo - 1];
    return NULL;
}

typedef struct {
    uint64_t id;
    uint32_t fid;
    uint32_t grid[3], block[3], shared;
    uint8_t instrumented, graph;
    uint32_t offset;
    uint64_t records, lanes;
    int ended;
    uint64_t start, end, blocks_total, blocks_sampled, end_records, dropped;
} launch_t;

static launch_t *launches;
static size_t nlaunches, caplaunches;

static launch_t *launch_by_id(uint64_t id) {
    /* ids are increasing: binary search, else linear */
    size_t lo = 0, hi = nlaunches;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (launches[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < nlaunches && launches[lo].id == id) return &launches[lo];
    for (lo = 0; lo < nlaunches; lo++)
        if (launches[lo].id == id) return &launches[lo];
    return NULL;
}

static char **reason_names;
static uint32_t *reason_index;
static uint32_t nreasons;

static int reason_slot(uint32_t index) {
    uint32_t i;
    for (i = 0; i < nreasons; i++)
        if (reason_index[i] == index) return (int)i;
    return -1;
}

/* ------------------------------------------------------------------ */

static const char *kind_name(uint32_t k) {
    static const char *names[] = {"?",          "HELLO", "MODULE",        "FUNCTION",   "LAUNCH",
                                  "ACCESS",     "KERNEL_END", "ALLOC",    "FREE",       "STALL_REASONS",
                                  "PC_SAMPLES", "INSTR_COUNTS", "HOST_MODULE", "DROPPED", "END", "MODULE_DATA"};
    return k <= 15 ? names[k] : (k >= 1024 ? "EXTENSION" : "UNKNOWN");
}

static const char *space_name(unsigned s) {
    static const char *n[] = {"none", "global", "shared", "local"};
    return s < 4 ? n[s] : "?";
}

static void die(size_t off, uint32_t kind, const char *msg) {
    fprintf(stderr, "gprdump: frame at byte %zu (kind %u %s): %s\n", off, kind, kind_name(kind), msg);
    exit(1);
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    if (!f) {
        fprintf(stderr, "gprdump: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    for (;;) {
        size_t k;
        if (len == cap) {
            cap = cap ? cap * 2 : (1u << 20);
            buf = (uint8_t *)realloc(buf, cap);
            if (!buf) exit(3);
        }
        k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) break;
    }
    fclose(f);
    *n = len;
    return buf;
}

/* Modules: counted, checked against their content key, written out. */
static const char *cubin_dir;
static uint64_t module_bytes, modules_with_bytes;
/* A module whose bytes come in MODULE_DATA chunks (version 3). */
static uint8_t *chunk;
static uint64_t chunk_key, chunk_id;
static size_t chunk_size, chunk_have;

static void module_done(size_t pos, uint32_t kind, const uint8_t *b, uint32_t size, uint64_t key) {
    module_bytes += size;
    modules_with_bytes++;
    if (gpw_fnv1a64(b, size) != key) die(pos, kind, "content_key is not the FNV-1a of the bytes");
    if (cubin_dir) {
        char fn[4096];
        FILE *f;
        snprintf(fn, sizeof fn, "%s/%016" PRIx64 ".cubin", cubin_dir, key);
        f = fopen(fn, "wb");
        if (f) {
            fwrite(b, 1, size, f);
            fclose(f);
        }
    }
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int o_launches = 0, o_stats = 0, o_pcs = 0, o_stalls = 0, o_instr = 0;
    int i;
    size_t n, pos, nframes = 0;
    uint8_t *data;
    uint64_t kind_count[16] = {0}, kind_bytes[16] = {0};
    int saw_end = 0;
    uint64_t end_frames = 0;
    int32_t end_code = 0;
    uint64_t access_records = 0, access_lanes = 0, access_events = 0, dropped_records = 0, dropped_bytes = 0, pc_dropped = 0;
    uint64_t allocs = 0, frees = 0, pc_samples = 0;
    uint64_t instrumented = 0, ended = 0, dev_dropped = 0, graph_launches = 0;
    ht_t temporal = {0}, pcval = {0}, pctot = {0}, pcseen = {0};
    int hello_mode = 0;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fnv") && i + 1 < argc) {
            size_t fn;
            uint8_t *fd = read_file(argv[i + 1], &fn);
            printf("%016" PRIx64 "\n", gpw_fnv1a64(fd, fn));
            return 0;
        } else if (!strcmp(argv[i], "--launches"))
            o_launches = 1;
        else if (!strcmp(argv[i], "--stats"))
            o_stats = 1;
        else if (!strcmp(argv[i], "--pcs"))
            o_pcs = 1;
        else if (!strcmp(argv[i], "--stalls"))
            o_stalls = 1;
        else if (!strcmp(argv[i], "--instr"))
            o_instr = 1;
        else if (!strcmp(argv[i], "--cubins") && i + 1 < argc)
            cubin_dir = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: gprdump [--launches] [--stats] [--pcs] [--stalls] [--instr] [--cubins DIR] FILE\n"
                            "       gprdump --fnv FILE\n");
            return 2;
        } else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "gprdump: no input file\n");
        return 2;
    }
    data = read_file(path, &n);

    /* Pass 1: framing, HELLO, FUNCTION, LAUNCH, STALL_REASONS. */
    pos = 0;
    while (pos < n) {
        uint32_t kind, len;
        rd_t r;
        if (n - pos < 8) {
            fprintf(stderr, "gprdump: truncated frame header at byte %zu\n", pos);
            break;
        }
        kind = gpw_load_u32(data + pos);
        len = gpw_load_u32(data + pos + 4);
        if (len > GPW_MAX_PAYLOAD) die(pos, kind, "length over 64 MiB");
        if (n - pos - 8 < len) {
            fprintf(stderr, "gprdump: truncated frame at byte %zu (kind %u %s): %u payload bytes, %zu present\n", pos,
                    kind, kind_name(kind), len, n - pos - 8);
            break;
        }
        if (nframes == 0 && kind != GPW_HELLO) die(pos, kind, "stream does not start with HELLO");
        if (kind == 0 || (kind > GPW_MODULE_DATA && kind < GPW_FIRST_EXTENSION)) die(pos, kind, "unknown frame kind");
        if (chunk_size && kind != GPW_MODULE_DATA) die(pos, kind, "a chunked module's MODULE_DATA frames must follow it");
        if (saw_end) die(pos, kind, "frame after END");
        r.p = data + pos + 8;
        r.n = len;
        r.pos = 0;
        r.err = 0;
        if (kind <= 15) {
            kind_count[kind]++;
            kind_bytes[kind] += 8 + len;
        }
        switch (kind) {
        case GPW_HELLO: {
            uint32_t magic = u32(&r);
            uint16_t ver = u16(&r), flags = u16(&r);
            int32_t rank = (int32_t)u32(&r);
            uint32_t pid = u32(&r);
            uint8_t mode = u8(&r);
            uint32_t P = u32(&r), K = u32(&r);
            uint64_t start = u64(&r);
            char *host = str(&r), *gpu = str(&r), *uuid = str(&r), *drv = str(&r), *cuda = str(&r);
            uint16_t sm = u16(&r);
            int32_t device = ver >= 3 ? (int32_t)u32(&r) : -1;
            uint32_t props[8] = {0};
            uint64_t mem = 0;
            int k;
            if (ver >= 3) {
                for (k = 0; k < 8; k++) props[k] = u32(&r);
                mem = u64(&r);
            }
            if (nframes != 0) die(pos, kind, "second HELLO");
            if (magic != GPW_MAGIC) die(pos, kind, "bad magic");
            if (ver < GPW_MIN_VERSION || ver > GPW_VERSION) die(pos, kind, "unsupported version");
            hello_mode = mode;
            printf("HELLO version=%u flags=%u rank=%d pid=%u mode=%u P=%u K=%u start_ns=%" PRIu64 "\n", ver, flags, rank,
                   pid, mode, P, K, start);
            printf("HELLO host=%s gpu=\"%s\" uuid=%s driver=%s cuda=\"%s\" sm=%u device=%d\n", host, gpu, uuid, drv, cuda,
                   sm, device);
            if (ver >= 3)
                printf("HELLO sms=%u clock_khz=%u mem_clock_khz=%u mem_bus_bits=%u l2=%u regs_per_sm=%u smem_per_sm=%u "
                       "threads_per_sm=%u mem=%" PRIu64 "\n",
                       props[0], props[1], props[2], props[3], props[4], props[5], props[6], props[7], mem);
            free(host), free(gpu), free(uuid), free(drv), free(cuda);
            break;
        }
        case GPW_MODULE: {
            uint64_t id = u64(&r), key = u64(&r);
            uint32_t size = u32(&r);
            uint8_t has = u8(&r);
            const uint8_t *b = has == 1 ? bytes(&r, size) : NULL;
            (void)id;
            if (has > 2) die(pos, kind, "has_bytes over 2");
            if (has == 2) { /* the bytes follow in MODULE_DATA frames */
                chunk = (uint8_t *)malloc(size ? size : 1);
                if (!chunk) exit(3);
                chunk_size = size, chunk_have = 0, chunk_key = key, chunk_id = id;
                if (!size) die(pos, kind, "a chunked module of 0 bytes");
            }
            if (has == 1 && b) module_done(pos, kind, b, size, key);
            break;
        }
        case GPW_MODULE_DATA: {
            uint64_t id = u64(&r), off = u64(&r);
            size_t len = r.n - r.pos;
            if (!chunk_size) die(pos, kind, "MODULE_DATA without a chunked MODULE before it");
            if (id != chunk_id || off != chunk_have || chunk_have + len > chunk_size)
                die(pos, kind, "MODULE_DATA out of order, of another module, or past the size");
            memcpy(chunk + chunk_have, bytes(&r, len), len);
            chunk_have += len;
            if (chunk_have == chunk_size) {
                module_done(pos, kind, chunk, chunk_size, chunk_key);
                free(chunk);
                chunk = NULL;
                chunk_size = 0;
            }
            break;
        }
        case GPW_FUNCTION: {
            func_t f;
            memset(&f, 0, sizeof f);
            f.id = u32(&r);
            f.module = u64(&r);
            f.pc = u64(&r);
            f.size = u32(&r);
            f.name = str(&r);
            if (func_by_id(f.id)) die(pos, kind, "function id defined twice");
            if (nfuncs == capfuncs) {
                capfuncs = capfuncs ? capfuncs * 2 : 64;
                funcs = (func_t *)realloc(funcs, capfuncs * sizeof(func_t));
                if (!funcs) exit(3);
            }
            funcs[nfuncs++] = f;
            break;
        }
        case GPW_LAUNCH: {
            launch_t l;
            int k;
            uint16_t nf;
            memset(&l, 0, sizeof l);
            l.id = u64(&r);
            l.fid = u32(&r);
            for (k = 0; k < 3; k++) l.grid[k] = u32(&r);
            for (k = 0; k < 3; k++) l.block[k] = u32(&r);
            l.shared = u32(&r);
            (void)u64(&r);
            {
                uint8_t fl = u8(&r);
                l.instrumented = fl & GPW_LAUNCH_TRACED;
                l.graph = (fl & GPW_LAUNCH_GRAPH) ? 1 : 0;
                graph_launches += l.graph;
            }
            l.offset = u32(&r);
            nf = u16(&r);
            bytes(&r, (size_t)nf * 8);
            if (nlaunches == caplaunches) {
                caplaunches = caplaunches ? caplaunches * 2 : 256;
                launches = (launch_t *)realloc(launches, caplaunches * sizeof(launch_t));
                if (!launches) exit(3);
            }
            launches[nlaunches++] = l;
            instrumented += l.instrumented;
            break;
        }
        case GPW_STALL_REASONS: {
            uint32_t c = u32(&r), k;
            nreasons = c;
            reason_names = (char **)calloc(c + 1, sizeof(char *));
            reason_index = (uint32_t *)calloc(c + 1, sizeof(uint32_t));
            for (k = 0; k < c && !r.err; k++) {
                reason_index[k] = u32(&r);
                reason_names[k] = str(&r);
            }
            break;
        }
        default: break;
        }
        if (r.err) die(pos, kind, "payload ends before its fields");
        nframes++;
        pos += 8 + (size_t)len;
    }
    if (nframes == 0) {
        fprintf(stderr, "gprdump: empty stream\n");
        return 1;
    }
    for (i = 0; (size_t)i < nfuncs; i++) {
        funcs[i].reason_samples = (uint64_t *)calloc(nreasons + 1, sizeof(uint64_t));
        if (funcs[i].pc) {
            by_pc = (func_t **)realloc(by_pc, (nby_pc + 1) * sizeof(func_t *));
            by_pc[nby_pc++] = &funcs[i];
        }
    }
    qsort(by_pc, nby_pc, sizeof(func_t *), cmp_pc);

    /* Pass 2: everything else. */
    pos = 0;
    nframes = 0;
    while (pos + 8 <= n) {
        uint32_t kind = gpw_load_u32(data + pos), len = gpw_load_u32(data + pos + 4);
        rd_t r;
        if (n - pos - 8 < len) break;
        r.p = data + pos + 8;
        r.n = len;
        r.pos = 0;
        r.err = 0;
        switch (kind) {
        case GPW_ACCESS: {
            uint64_t lid = u64(&r);
            uint32_t cnt = u32(&r), k;
            launch_t *L = launch_by_id(lid);
            func_t *kf = L ? func_by_id(L->fid) : NULL;
            if (!L) die(pos, kind, "ACCESS for an unknown launch");
            for (k = 0; k < cnt && !r.err; k++) {
                uint64_t pc = u64(&r);
                uint32_t block = u32(&r);
                uint16_t warp = u16(&r);
                uint8_t space = u8(&r), flags = u8(&r);
                uint32_t active = u32(&r);
                uint8_t size = u8(&r), enc = u8(&r);
                uint32_t lane, m;
                func_t *f = func_by_pc(pc);
                int op;
                uint64_t addrs[32];
                const uint8_t *vals[32];
                bytes(&r, 2);
                if (!(size == 0 || size == 1 || size == 2 || size == 4 || size == 8 || size == 16))
                    die(pos, kind, "record with an invalid size");
                if ((enc & ~(GPW_ENC_AFFINE | GPW_ENC_UNIFORM)) || (enc && (size == 0 || active == 0)))
                    die(pos, kind, "record with an invalid encoding");
                if (!f) f = kf;
                access_records++;
                L->records++;
                if (size == 0) {
                    access_events++;
                    continue;
                }
                op = (flags & GPW_ACC_ATOMIC) ? 2 : ((flags & GPW_ACC_WRITE) ? 1 : 0);
                if (o_pcs) {
                    ent_t *e = ht_get(&pcseen, pc, ((uint64_t)space << 8) | (uint64_t)(flags & 7), size, 1);
                    e->x++;
                }
                /* Lane entries, plain or compact (docs/wire.md). */
                if (enc & GPW_ENC_AFFINE) {
                    uint64_t base = u64(&r), step = u64(&r);
                    for (m = active; m; m &= m - 1) addrs[__builtin_ctz(m)] = base + step * (uint64_t)__builtin_ctz(m);
                }
                for (m = active; m && !r.err; m &= m - 1) {
                    lane = (uint32_t)__builtin_ctz(m);
                    if (!(enc & GPW_ENC_AFFINE)) addrs[lane] = u64(&r);
                    if (!(enc & GPW_ENC_UNIFORM)) vals[lane] = bytes(&r, size);
                }
                if (enc & GPW_ENC_UNIFORM) {
                    const uint8_t *u = bytes(&r, size);
                    for (m = active; m; m &= m - 1) vals[__builtin_ctz(m)] = u;
                }
                if (r.err) break;
                for (lane = 0; lane < 32; lane++) {
                    uint64_t addr, v0 = 0, v1 = 0;
                    const uint8_t *v;
                    if (!(active & (1u << lane))) continue;
                    addr = addrs[lane];
                    v = vals[lane];
                    if (!v) break;
                    memcpy(&v0, v, size > 8 ? 8 : size);
                    if (size > 8) memcpy(&v1, v + 8, size - 8);
                    access_lanes++;
                    L->lanes++;
                    if (!o_stats || !f) continue;
                    f->lanes[space & 3][op]++;
                    /* spatial: per pc and value */
                    {
                        ent_t *e = ht_get(&pcval, pc, v0, v1 ^ ((uint64_t)size << 56) ^ ((uint64_t)op << 62), 1);
                        ent_t *t = ht_get(&pctot, pc, (uint64_t)op, (uint64_t)space | ((uint64_t)size << 8), 1);
                        e->x++;
                        t->x++;
                    }
                    /* temporal: per thread, address and direction */
                    if (op != 2) {
                        uint64_t thread = (uint64_t)warp * 32 + lane;
                        uint64_t key_a = (lid << 2) | (uint64_t)op | ((uint64_t)space << 62);
                        ent_t *e = ht_get(&temporal, key_a, ((uint64_t)block << 32) | thread, addr, 1);
                        int red = e->z != 0 && e->x == v0 && e->y == v1 && (e->z & 0xff) == size;
                        e->x = v0;
                        e->y = v1;
                        e->z = 0x100 | size;
                        if (op == 0) {
                            f->tr_reads++;
                            f->tr_read_red += red;
                        } else {
                            f->tr_writes++;
                            f->tr_write_red += red;
                        }
                    }
                }
            }
            if (r.err) die(pos, kind, "payload ends before its fields");
            if (r.pos != r.n) die(pos, kind, "bytes left after the records");
            break;
        }
        case GPW_KERNEL_END: {
            uint64_t lid = u64(&r);
            launch_t *L = launch_by_id(lid);
            if (!L) die(pos, kind, "KERNEL_END for an unknown launch");
            L->ended = 1;
            L->start = u64(&r);
            L->end = u64(&r);
            L->blocks_total = u32(&r);
            L->blocks_sampled = u32(&r);
            L->end_records = u64(&r);
            L->dropped = u64(&r);
            dev_dropped += L->dropped;
            ended++;
            break;
        }
        case GPW_ALLOC: allocs++; break;
        case GPW_FREE: frees++; break;
        case GPW_PC_SAMPLES: {
            uint64_t lid = u64(&r);
            uint32_t cnt = u32(&r), k;
            (void)lid;
            for (k = 0; k < cnt && !r.err; k++) {
                uint32_t fid = u32(&r), off = u32(&r);
                uint16_t nr = u16(&r), j;
                func_t *f = func_by_id(fid);
                (void)off;
                if (!f) die(pos, kind, "PC_SAMPLES for an unknown function");
                for (j = 0; j < nr && !r.err; j++) {
                    uint32_t idx = u32(&r), s = u32(&r);
                    int slot = reason_slot(idx);
                    f->samples += s;
                    pc_samples += s;
                    if (slot >= 0) f->reason_samples[slot] += s;
                }
            }
            break;
        }
        case GPW_INSTR_COUNTS: {
            uint64_t lid = u64(&r);
            uint32_t cnt = u32(&r), k;
            (void)lid;
            for (k = 0; k < cnt && !r.err; k++) {
                uint32_t fid = u32(&r), off = u32(&r);
                uint64_t inst = u64(&r), th = u64(&r);
                func_t *f = func_by_id(fid);
                (void)off;
                if (!f) die(pos, kind, "INSTR_COUNTS for an unknown function");
                f->inst += inst;
                f->thread_inst += th;
            }
            break;
        }
        case GPW_HOST_MODULE: {
            uint16_t ns;
            (void)u64(&r);
            free(str(&r));
            free(str(&r));
            ns = u16(&r);
            bytes(&r, (size_t)ns * 16);
            break;
        }
        case GPW_DROPPED:
            dropped_records += u64(&r);
            dropped_bytes += u64(&r);
            if (r.n - r.pos >= 8) pc_dropped += u64(&r); /* optional field */
            break;
        case GPW_END:
            saw_end = 1;
            end_frames = u64(&r);
            end_code = (int32_t)u32(&r);
            if (end_frames != nframes) {
                fprintf(stderr, "gprdump: END says %" PRIu64 " frames, %zu precede it\n", end_frames, nframes);
                return 1;
            }
            break;
        default: break;
        }
        if (r.err) die(pos, kind, "payload ends before its fields");
        nframes++;
        pos += 8 + (size_t)len;
    }

    printf("FRAMES total=%zu bytes=%zu end=%s exit_code=%d\n", nframes, n, saw_end ? "yes" : "NO (truncated)",
           saw_end ? end_code : -1);
    for (i = 1; i <= 15; i++)
        if (kind_count[i])
            printf("KIND %-13s frames=%" PRIu64 " bytes=%" PRIu64 "\n", kind_name((uint32_t)i), kind_count[i],
                   kind_bytes[i]);
    printf("SUMMARY mode=%d modules_with_bytes=%" PRIu64 " cubin_bytes=%" PRIu64 " functions=%zu launches=%zu "
           "instrumented=%" PRIu64 " kernel_ends=%" PRIu64 " graph_launches=%" PRIu64 "\n",
           hello_mode, modules_with_bytes, module_bytes, nfuncs, nlaunches, instrumented, ended, graph_launches);
    printf("SUMMARY access_records=%" PRIu64 " block_events=%" PRIu64 " lane_accesses=%" PRIu64
           " device_dropped=%" PRIu64 " host_dropped_records=%" PRIu64 " host_dropped_bytes=%" PRIu64 "\n",
           access_records, access_events, access_lanes, dev_dropped, dropped_records, dropped_bytes);
    printf("SUMMARY allocs=%" PRIu64 " frees=%" PRIu64 " pc_samples=%" PRIu64 " stall_reasons=%u pc_samples_dropped=%" PRIu64
           "\n", allocs, frees, pc_samples, nreasons, pc_dropped);
    {
        size_t k, bad = 0;
        for (k = 0; k < nlaunches; k++)
            if (launches[k].ended && launches[k].end_records != launches[k].records) bad++;
        if (bad) printf("WARNING %zu launches whose KERNEL_END record count differs from their ACCESS records\n", bad);
    }

    if (o_launches) {
        size_t k;
        for (k = 0; k < nlaunches; k++) {
            launch_t *L = &launches[k];
            func_t *f = func_by_id(L->fid);
            printf("LAUNCH id=%" PRIu64 " fn=%s grid=%ux%ux%u block=%ux%ux%u shared=%u instr=%u graph=%u r=%u records=%" PRIu64
                   " lanes=%" PRIu64 " blocks=%" PRIu64 "/%" PRIu64 " dur_us=%.1f dropped=%" PRIu64 "%s\n",
                   L->id, f ? f->name : "?", L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1], L->block[2],
                   L->shared, L->instrumented, L->graph, L->offset, L->records, L->lanes, L->blocks_sampled, L->blocks_total,
                   (L->ended && L->end > L->start && L->start) ? (L->end - L->start) / 1000.0 : -1.0, L->dropped,
                   L->ended ? "" : " NO_KERNEL_END");
        }
    }
    if (o_stats) {
        size_t k;
        for (k = 0; k < nfuncs; k++) {
            func_t *f = &funcs[k];
            uint64_t tot = 0;
            int s, o;
            for (s = 0; s < 4; s++)
                for (o = 0; o < 3; o++) tot += f->lanes[s][o];
            if (!tot) continue;
            printf("FUNC fn=%s pc=0x%" PRIx64 " size=%u global_r=%" PRIu64 " global_w=%" PRIu64 " global_atom=%" PRIu64
                   " shared_r=%" PRIu64 " shared_w=%" PRIu64 " local_r=%" PRIu64 " local_w=%" PRIu64 "\n",
                   f->name, f->pc, f->size, f->lanes[1][0], f->lanes[1][1], f->lanes[1][2], f->lanes[2][0],
                   f->lanes[2][1], f->lanes[3][0], f->lanes[3][1]);
            printf("TEMPORAL fn=%s reads=%" PRIu64 " read_redundant=%" PRIu64 " writes=%" PRIu64
                   " write_redundant=%" PRIu64 "\n",
                   f->name, f->tr_reads, f->tr_read_red, f->tr_writes, f->tr_write_red);
        }
        /* per-pc spatial summary */
        {
            ht_t agg = {0};
            size_t j;
            for (j = 0; j < pcval.cap; j++) {
                ent_t *e = &pcval.e[j], *a;
                uint64_t op;
                if (!e->used) continue;
                op = (e->c >> 62) & 3;
                a = ht_get(&agg, e->a, op, 0, 1);
                a->z++; /* distinct values */
                if (e->x > a->x) {
                    a->x = e->x;
                    a->y = e->b;
                }
            }
            for (j = 0; j < pctot.cap; j++) {
                ent_t *t = &pctot.e[j], *a;
                func_t *f;
                if (!t->used) continue;
                a = ht_get(&agg, t->a, t->b, 0, 0);
                f = func_by_pc(t->a);
                printf("PC fn=%s off=0x%" PRIx64 " op=%s space=%s size=%u lanes=%" PRIu64 " distinct=%" PRIu64
                       " top=0x%" PRIx64 " top_count=%" PRIu64 "\n",
                       f ? f->name : "?", f ? t->a - f->pc : t->a, t->b == 0 ? "R" : (t->b == 1 ? "W" : "A"),
                       space_name((unsigned)(t->c & 0xff)), (unsigned)(t->c >> 8), t->x, a ? a->z : 0,
                       a ? a->y : 0, a ? a->x : 0);
            }
        }
    }
    if (o_pcs) {
        size_t j;
        for (j = 0; j < pcseen.cap; j++) {
            ent_t *e = &pcseen.e[j];
            func_t *f;
            if (!e->used) continue;
            f = func_by_pc(e->a);
            printf("ACCPC fn=%s off=0x%" PRIx64 " space=%s flags=%u size=%" PRIu64 " records=%" PRIu64 "\n",
                   f ? f->name : "?", f ? e->a - f->pc : e->a, space_name((unsigned)(e->b >> 8)),
                   (unsigned)(e->b & 0xff), e->c, e->x);
        }
    }
    if (o_stalls) {
        size_t k;
        for (k = 0; k < nfuncs; k++) {
            func_t *f = &funcs[k];
            uint32_t j, best[3] = {0, 0, 0};
            if (!f->samples) continue;
            printf("STALLS fn=%s samples=%" PRIu64, f->name, f->samples);
            for (j = 0; j < 3; j++) {
                uint32_t q, b = UINT32_MAX;
                uint64_t bv = 0;
                for (q = 0; q < nreasons; q++) {
                    int used = 0;
                    uint32_t z;
                    for (z = 0; z < j; z++)
                        if (best[z] == q) used = 1;
                    if (!used && f->reason_samples[q] > bv) {
                        bv = f->reason_samples[q];
                        b = q;
                    }
                }
                if (b == UINT32_MAX) break;
                best[j] = b;
                printf(" %s=%.1f%%", reason_names[b], 100.0 * (double)bv / (double)f->samples);
            }
            printf("\n");
        }
    }
    if (o_instr) {
        size_t k;
        for (k = 0; k < nfuncs; k++)
            if (funcs[k].inst)
                printf("INSTR fn=%s inst_executed=%" PRIu64 " thread_inst_executed=%" PRIu64 "\n", funcs[k].name,
                       funcs[k].inst, funcs[k].thread_inst);
    }
    free(data);
    return saw_end ? 0 : 1;
}
