/*
 * cupti_pass.cpp - pcsampling and hybrid modes: CUPTI.
 *
 * pcsampling: the PC Sampling API (cupti_pcsampling.h), all stall reasons,
 *   CONTINUOUS collection by default: launches run as the application issues
 *   them and samples carry no launch (launch 0; the collector splits a
 *   function's samples over its calling contexts).
 *   GPUPROF_PC_COLLECTION=serialized makes every launch synchronous so that
 *   each sample carries the correlation id of its launch.
 * hybrid: CUPTI SASS metrics (smsp__sass_inst_executed and
 *   smsp__sass_thread_inst_executed per instruction), enabled at the
 *   context's first launch (GPUPROF_SASS_KERNEL: at the first launch of the
 *   kernel it names) and read once at the context's end (GPUPROF_SASS_FLUSH=
 *   launch: after every launch, which is then synchronous). Only the
 *   function launched when they are enabled gets counts on the H100: one
 *   function per process (docs/inject.md, "Hybrid pass").
 * Both: MODULE/FUNCTION from module loads, LAUNCH from the launch callbacks,
 *   KERNEL_END from CONCURRENT_KERNEL activity records (GPU timestamps),
 *   ALLOC/FREE from the driver's allocation calls.
 *
 * Only this file includes cupti.h (sanitizer.h cannot share a translation unit).
 */
#include <cuda.h>
#include <cupti.h>
#include <cupti_pcsampling.h>
#include <cupti_profiler_target.h>
#include <cupti_sass_metrics.h>
#include <cupti_target.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "passes.h"

#ifndef GP_KERNEL_RECORD
#define GP_KERNEL_RECORD CUpti_ActivityKernel9
#endif
#define GP_XSTR(x) #x
#define GP_STR(x) GP_XSTR(x)

namespace gp {
namespace {

bool cupti_ok(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return true;
    const char *s = nullptr;
    cuptiGetResultString(r, &s);
    log("%s failed: %s (%d)", what, s ? s : "?", (int)r);
    return false;
}
#define CUPTI(call) cupti_ok((call), #call)

struct CMod {
    uint64_t id = 0;
    uint64_t crc = 0;
    std::unordered_map<std::string, uint32_t> funcs;
};

struct PCtx {
    CUcontext ctx = nullptr;
    uint32_t device = 0;
    bool pcs = false; // PC sampling enabled
    uint64_t last_get_ns = 0; // continuous mode: the last cuptiPCSamplingGetData (under g_pcs_mu)
    bool pcs_ranges = false; // started and stopped around the launches kernel sampling chooses
    bool sass = false; // SASS metrics enabled
    bool sass_pending = false; // enable at the first launch (GPUPROF_SASS_KERNEL: the first of that kernel)
    size_t nreasons = 0;
    CUpti_PCSamplingData cfgbuf;
    CUpti_PCSamplingData getbuf;
    std::vector<uint32_t> reason_index;
};

CUpti_SubscriberHandle g_sub;
std::mutex g_mu;
std::unordered_map<uint32_t, CMod> g_mods;             // CUPTI module id -> module
std::unordered_map<uint64_t, uint32_t> g_crc_mod;       // cubin CRC -> CUPTI module id
std::unordered_map<std::string, uint32_t> g_name_fid;   // last module loaded wins
std::unordered_map<uint32_t, uint64_t> g_corr;          // correlation id -> launch id
std::unordered_map<uint64_t, uint32_t> g_launch_blocks; // launch id -> blocks
std::unordered_map<CUcontext, PCtx *> g_ctxs;
std::set<uint32_t> g_sass_devices;
std::mutex g_sass_mu; // enabling SASS metrics at a launch (sass_at_launch) or giving up at the end (sass_unmatched)
std::atomic<uint64_t> g_next_launch{1};
std::mutex g_pcs_mu;
bool g_stall_reasons_sent = false;
int64_t g_ts_offset = 0; // Unix ns minus CUPTI timestamp
uint64_t g_metric_inst = 0, g_metric_thread = 0;
bool g_profiler_initialized = false;

// Time accounts for the exit line (GPUPROF_STATS): subscribing, enabling and
// configuring PC sampling, reading samples, and the final read and disable.
std::atomic<uint64_t> g_st_init_ns{0}, g_st_setup_ns{0}, g_st_get_ns{0}, g_st_get_n{0}, g_st_finish_ns{0};

// CUDA graph launches: the host stack of each cuGraphLaunch by its
// correlation id (its kernels' activity records carry that id), the launch
// id given to the first kernel of each function in it, and PC samples that
// came before their kernel's record (docs/inject.md, "CUDA graphs").
struct GraphLaunch {
    std::vector<uint64_t> frames;
    uint64_t stream = 0;
    std::map<uint32_t, uint64_t> first; // function id -> launch id
};
struct GraphPC {
    uint32_t fid, off;
    std::vector<std::pair<uint32_t, uint32_t>> reasons; // (reason index, samples)
};
std::unordered_map<uint32_t, GraphLaunch> g_graphs;
std::unordered_map<uint32_t, std::vector<GraphPC>> g_graph_pcs;

thread_local uint32_t t_rt_corr = 0;
thread_local bool t_rt_seen = false;
thread_local PCtx *t_pcs_started = nullptr; // this thread's launch runs inside a PC sampling range
thread_local int t_depth = 0;

/* ---- functions ---- */

uint32_t function_for(uint64_t crc, const char *name) {
    std::lock_guard<std::mutex> lk(g_mu);
    std::string n = name ? name : "";
    auto cm = g_crc_mod.find(crc);
    if (cm != g_crc_mod.end()) {
        CMod &m = g_mods[cm->second];
        auto f = m.funcs.find(n);
        if (f != m.funcs.end()) return f->second;
        uint32_t id = new_function_id();
        m.funcs[n] = id;
        emit_function(id, m.id, 0, 0, n);
        return id;
    }
    auto f = g_name_fid.find(n);
    if (f != g_name_fid.end()) return f->second;
    uint32_t id = new_function_id();
    g_name_fid[n] = id;
    emit_function(id, 0, 0, 0, n);
    return id;
}

uint32_t function_by_name(const char *name) {
    std::lock_guard<std::mutex> lk(g_mu);
    std::string n = name ? name : "";
    auto f = g_name_fid.find(n);
    if (f != g_name_fid.end()) return f->second;
    uint32_t id = new_function_id();
    g_name_fid[n] = id;
    emit_function(id, 0, 0, 0, n);
    return id;
}

void on_module_loaded(const CUpti_ResourceData *rd) {
    const CUpti_ModuleResourceData *md = (const CUpti_ModuleResourceData *)rd->resourceDescriptor;
    if (!md || !md->pCubin || md->cubinSize == 0) return;
    uint64_t mid = emit_module(md->pCubin, md->cubinSize);
    CUpti_GetCubinCrcParams cp;
    memset(&cp, 0, sizeof cp);
    cp.size = CUpti_GetCubinCrcParamsSize;
    cp.cubinSize = md->cubinSize;
    cp.cubin = md->pCubin;
    uint64_t crc = 0;
    if (CUPTI(cuptiGetCubinCrc(&cp))) crc = cp.cubinCrc;
    std::vector<ElfFunc> fns;
    cubin_functions(md->pCubin, md->cubinSize, fns);
    std::lock_guard<std::mutex> lk(g_mu);
    CMod &m = g_mods[md->moduleId];
    m = CMod();
    m.id = mid;
    m.crc = crc;
    g_crc_mod[crc] = md->moduleId;
    for (const ElfFunc &f : fns) {
        if (m.funcs.count(f.name)) continue;
        uint32_t id = new_function_id();
        m.funcs[f.name] = id;
        g_name_fid[f.name] = id;
        emit_function(id, mid, 0, f.size, f.name);
    }
}

/* ---- PC sampling ---- */

void alloc_pc_buffer(CUpti_PCSamplingData &d, size_t npcs, size_t nreasons) {
    memset(&d, 0, sizeof d);
    d.size = sizeof(CUpti_PCSamplingData);
    d.collectNumPcs = npcs;
    d.pPcData = (CUpti_PCSamplingPCData *)calloc(npcs, sizeof(CUpti_PCSamplingPCData));
    for (size_t i = 0; d.pPcData && i < npcs; i++) {
        d.pPcData[i].size = sizeof(CUpti_PCSamplingPCData);
        d.pPcData[i].stallReason = (CUpti_PCSamplingStallReason *)calloc(nreasons, sizeof(CUpti_PCSamplingStallReason));
    }
}

/* hold_graph_pcs keeps the samples of a graph launch until the activity
 * records of its kernels have given them launch ids. */
void hold_graph_pcs(const CUpti_PCSamplingData &d, uint32_t corr, const std::vector<size_t> &idx) {
    std::vector<GraphPC> held;
    for (size_t i : idx) {
        const CUpti_PCSamplingPCData &pd = d.pPcData[i];
        GraphPC g;
        g.fid = function_for(pd.cubinCrc, pd.functionName);
        g.off = (uint32_t)pd.pcOffset;
        for (size_t k = 0; k < pd.stallReasonCount; k++)
            if (pd.stallReason[k].samples) {
                uint32_t reason = pd.stallReason[k].pcSamplingStallReasonIndex, n = pd.stallReason[k].samples; // packed
                g.reasons.emplace_back(reason, n);
            }
        if (!g.reasons.empty()) held.push_back(std::move(g));
    }
    std::lock_guard<std::mutex> lk(g_mu);
    auto &v = g_graph_pcs[corr];
    v.insert(v.end(), held.begin(), held.end());
}

/* emit_graph_pcs writes the held samples whose kernel has a launch id;
 * final writes the rest too, under launch 0 (the collector then places
 * them at their function's last context). */
void emit_graph_pcs(bool final) {
    std::map<uint64_t, std::vector<GraphPC>> out; // launch id -> samples
    {
        std::lock_guard<std::mutex> lk(g_mu);
        for (auto it = g_graph_pcs.begin(); it != g_graph_pcs.end();) {
            auto gl = g_graphs.find(it->first);
            std::vector<GraphPC> keep;
            for (GraphPC &p : it->second) {
                uint64_t lid = 0;
                if (gl != g_graphs.end()) {
                    auto f = gl->second.first.find(p.fid);
                    if (f != gl->second.first.end()) lid = f->second;
                }
                if (lid || final)
                    out[lid].push_back(std::move(p));
                else
                    keep.push_back(std::move(p));
            }
            if (keep.empty())
                it = g_graph_pcs.erase(it);
            else
                (it++)->second.swap(keep);
        }
    }
    for (auto &kv : out) {
        gpw_buf f;
        gpw_buf_init(&f);
        size_t off = gpw_pc_samples_begin(&f, kv.first);
        for (GraphPC &p : kv.second) {
            gpw_pc_sample_pc(&f, p.fid, p.off, (uint16_t)p.reasons.size());
            for (auto &r : p.reasons) gpw_pc_sample_reason(&f, r.first, r.second);
        }
        if (gpw_pc_samples_finish(&f, off, (uint32_t)kv.second.size()))
            out_push(&f, true, kv.second.size());
        else
            gpw_buf_free(&f);
    }
}

void emit_pc_data(const CUpti_PCSamplingData &d) {
    if (d.totalNumPcs == 0) return;
    std::map<uint32_t, std::vector<size_t>> by_corr;
    for (size_t i = 0; i < d.totalNumPcs; i++) by_corr[d.pPcData[i].correlationId].push_back(i);
    for (auto &g : by_corr) {
        uint64_t launch = 0;
        bool graph = false;
        if (g.first) {
            std::lock_guard<std::mutex> lk(g_mu);
            auto it = g_corr.find(g.first);
            if (it != g_corr.end()) launch = it->second;
            graph = launch == 0 && g_graphs.count(g.first);
        }
        if (graph) {
            hold_graph_pcs(d, g.first, g.second);
            continue;
        }
        gpw_buf f;
        gpw_buf_init(&f);
        size_t off = gpw_pc_samples_begin(&f, launch);
        uint32_t count = 0;
        for (size_t i : g.second) {
            const CUpti_PCSamplingPCData &pd = d.pPcData[i];
            uint16_t nr = 0;
            for (size_t k = 0; k < pd.stallReasonCount; k++)
                if (pd.stallReason[k].samples) nr++;
            if (nr == 0) continue;
            uint32_t fid = function_for(pd.cubinCrc, pd.functionName);
            gpw_pc_sample_pc(&f, fid, (uint32_t)pd.pcOffset, nr);
            for (size_t k = 0; k < pd.stallReasonCount; k++)
                if (pd.stallReason[k].samples)
                    gpw_pc_sample_reason(&f, pd.stallReason[k].pcSamplingStallReasonIndex, pd.stallReason[k].samples);
            count++;
        }
        if (count && gpw_pc_samples_finish(&f, off, count))
            out_push(&f, true, count);
        else
            gpw_buf_free(&f);
    }
    out_pc_samples_dropped(d.droppedSamples);
    if (d.droppedSamples || d.hardwareBufferFull)
        log("PC sampling: %llu samples dropped by the hardware%s", (unsigned long long)d.droppedSamples,
            d.hardwareBufferFull ? " (hardware buffer full)" : "");
}

/* Pull everything CUPTI has decoded for ctx. when_due (continuous mode, at
 * a launch): only if GPUPROF_PC_GET_MS have passed since the last read, so
 * that thousands of short launches do not each pay for one. */
void pcs_get(PCtx *pc, bool when_due = false) {
    if (!pc->pcs) return;
    std::lock_guard<std::mutex> lk(g_pcs_mu);
    const uint64_t t0 = stat_clock();
    if (when_due && t0 - pc->last_get_ns < (uint64_t)g_cfg.pc_get_ms * 1000000ull) return;
    pc->last_get_ns = t0;
    struct Acc {
        uint64_t t0;
        ~Acc() {
            g_st_get_ns += stat_clock() - t0;
            g_st_get_n++;
        }
    } acc{t0};
    for (int guard = 0; guard < 100000; guard++) {
        CUpti_PCSamplingGetDataParams p;
        memset(&p, 0, sizeof p);
        p.size = CUpti_PCSamplingGetDataParamsSize;
        p.ctx = pc->ctx;
        p.pcSamplingData = &pc->getbuf;
        CUptiResult r = cuptiPCSamplingGetData(&p);
        if (r != CUPTI_SUCCESS) {
            static bool once = false;
            if (!once) {
                once = true;
                cupti_ok(r, "cuptiPCSamplingGetData");
            }
            if (pc->getbuf.hardwareBufferFull) continue; // data lost, go on draining
            break;
        }
        emit_pc_data(pc->getbuf);
        if (pc->getbuf.remainingNumPcs == 0) break;
    }
}

bool setup_pcsampling(PCtx *pc) {
    CUpti_PCSamplingEnableParams ep;
    memset(&ep, 0, sizeof ep);
    ep.size = CUpti_PCSamplingEnableParamsSize;
    ep.ctx = pc->ctx;
    if (!CUPTI(cuptiPCSamplingEnable(&ep))) return false;

    size_t n = 0;
    CUpti_PCSamplingGetNumStallReasonsParams np;
    memset(&np, 0, sizeof np);
    np.size = CUpti_PCSamplingGetNumStallReasonsParamsSize;
    np.ctx = pc->ctx;
    np.numStallReasons = &n;
    if (!CUPTI(cuptiPCSamplingGetNumStallReasons(&np)) || n == 0) return false;
    pc->nreasons = n;
    pc->reason_index.assign(n, 0);
    std::vector<char *> names(n);
    for (size_t i = 0; i < n; i++) names[i] = (char *)calloc(CUPTI_STALL_REASON_STRING_SIZE, 1);
    CUpti_PCSamplingGetStallReasonsParams sp;
    memset(&sp, 0, sizeof sp);
    sp.size = CUpti_PCSamplingGetStallReasonsParamsSize;
    sp.ctx = pc->ctx;
    sp.numStallReasons = n;
    sp.stallReasonIndex = pc->reason_index.data();
    sp.stallReasons = names.data();
    if (!CUPTI(cuptiPCSamplingGetStallReasons(&sp))) return false;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!g_stall_reasons_sent) {
            g_stall_reasons_sent = true;
            gpw_buf f;
            gpw_buf_init(&f);
            size_t off = gpw_stall_reasons_begin(&f);
            for (size_t i = 0; i < n; i++) gpw_stall_reason(&f, pc->reason_index[i], names[i]);
            gpw_stall_reasons_finish(&f, off, (uint32_t)n);
            out_push(&f, false, 0);
        }
    }
    for (char *s : names) free(s);

    alloc_pc_buffer(pc->cfgbuf, g_cfg.pc_buffer_pcs, n);
    alloc_pc_buffer(pc->getbuf, g_cfg.pc_buffer_pcs, n);

    std::vector<CUpti_PCSamplingConfigurationInfo> cfg;
    CUpti_PCSamplingConfigurationInfo a;
    memset(&a, 0, sizeof a);
    a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    a.attributeData.samplingDataBufferData.samplingDataBuffer = &pc->cfgbuf;
    cfg.push_back(a);
    memset(&a, 0, sizeof a);
    a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    a.attributeData.stallReasonData.stallReasonCount = n;
    a.attributeData.stallReasonData.pStallReasonIndex = pc->reason_index.data();
    cfg.push_back(a);
    memset(&a, 0, sizeof a);
    a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    a.attributeData.collectionModeData.collectionMode = g_cfg.pc_serialized
                                                            ? CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED
                                                            : CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    cfg.push_back(a);
    // Kernel sampling: PC sampling runs only inside ranges around the
    // chosen launches (cuptiPCSamplingStart/Stop at their API enter and
    // exit), so the others run unserialized and unsampled.
    if (g_cfg.pc_serialized && hello_kernel_sampling() > 1) {
        memset(&a, 0, sizeof a);
        a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
        a.attributeData.enableStartStopControlData.enableStartStopControl = 1;
        cfg.push_back(a);
        pc->pcs_ranges = true;
    }
    if (g_cfg.pc_hwbuf_mb) {
        memset(&a, 0, sizeof a);
        a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
        a.attributeData.hardwareBufferSizeData.hardwareBufferSize = (size_t)g_cfg.pc_hwbuf_mb << 20;
        cfg.push_back(a);
    }
    if (g_cfg.pc_sleep_ms) {
        memset(&a, 0, sizeof a);
        a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN;
        a.attributeData.workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan = g_cfg.pc_sleep_ms;
        cfg.push_back(a);
    }
    if (g_cfg.pc_period >= 5) {
        memset(&a, 0, sizeof a);
        a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
        a.attributeData.samplingPeriodData.samplingPeriod = (uint32_t)g_cfg.pc_period;
        cfg.push_back(a);
    }
    CUpti_PCSamplingConfigurationInfoParams cp;
    memset(&cp, 0, sizeof cp);
    cp.size = CUpti_PCSamplingConfigurationInfoParamsSize;
    cp.ctx = pc->ctx;
    cp.numAttributes = cfg.size();
    cp.pPCSamplingConfigurationInfo = cfg.data();
    if (!CUPTI(cuptiPCSamplingSetConfigurationAttribute(&cp))) return false;

    // Read back what CUPTI chose, for the log.
    CUpti_PCSamplingConfigurationInfo q[2];
    memset(q, 0, sizeof q);
    q[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    q[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    cp.numAttributes = 2;
    cp.pPCSamplingConfigurationInfo = q;
    if (cuptiPCSamplingGetConfigurationAttribute(&cp) == CUPTI_SUCCESS)
        vlog("PC sampling: %zu stall reasons, period 2^%u cycles, collection mode %d", n,
             q[0].attributeData.samplingPeriodData.samplingPeriod, (int)q[1].attributeData.collectionModeData.collectionMode);
    return true;
}

void finish_pcsampling(PCtx *pc) {
    if (!pc->pcs) return;
    const uint64_t t0 = stat_clock();
    struct Acc {
        uint64_t t0;
        ~Acc() { g_st_finish_ns += stat_clock() - t0; }
    } acc{t0};
    pcs_get(pc);
    CUpti_PCSamplingDisableParams dp;
    memset(&dp, 0, sizeof dp);
    dp.size = CUpti_PCSamplingDisableParamsSize;
    dp.ctx = pc->ctx;
    CUPTI(cuptiPCSamplingDisable(&dp));
    std::lock_guard<std::mutex> lk(g_pcs_mu);
    emit_pc_data(pc->cfgbuf); // what CUPTI flushed at disable
    pc->pcs = false;
}

/* ---- SASS metrics (hybrid) ---- */

bool setup_sass(PCtx *pc) {
    if (!g_profiler_initialized) {
        CUpti_Profiler_Initialize_Params ip;
        memset(&ip, 0, sizeof ip);
        ip.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
        if (!CUPTI(cuptiProfilerInitialize(&ip))) return false;
        g_profiler_initialized = true;
    }
    if (!g_sass_devices.count(pc->device)) {
        CUpti_Device_GetChipName_Params cn;
        memset(&cn, 0, sizeof cn);
        cn.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
        cn.deviceIndex = pc->device;
        if (!CUPTI(cuptiDeviceGetChipName(&cn))) return false;
        const char *metrics[2] = {"smsp__sass_inst_executed", "smsp__sass_thread_inst_executed"};
        CUpti_SassMetrics_Config mc[2];
        memset(mc, 0, sizeof mc);
        size_t nm = 0;
        // smsp__sass_inst_executed only (the configuration NVIDIA's sample
        // verifies); GPUPROF_HYBRID_THREAD=1 adds the thread-level count.
        const char *want_thread = getenv("GPUPROF_HYBRID_THREAD");
        const int nwant = (want_thread && want_thread[0] == '1') ? 2 : 1;
        for (int i = 0; i < nwant; i++) {
            CUpti_SassMetrics_GetProperties_Params gp;
            memset(&gp, 0, sizeof gp);
            gp.structSize = CUpti_SassMetrics_GetProperties_Params_STRUCT_SIZE;
            gp.pChipName = cn.pChipName;
            gp.pMetricName = metrics[i];
            if (!CUPTI(cuptiSassMetricsGetProperties(&gp))) {
                if (i == 0) return false;
                continue; // the thread-level count is optional
            }
            mc[nm].metricId = gp.metric.metricId;
            mc[nm].outputGranularity = CUPTI_SASS_METRICS_OUTPUT_GRANULARITY_GPU;
            nm++;
        }
        g_metric_inst = mc[0].metricId;
        g_metric_thread = nm > 1 ? mc[1].metricId : ~0ull;
        CUpti_SassMetricsSetConfig_Params sc;
        memset(&sc, 0, sizeof sc);
        sc.structSize = CUpti_SassMetricsSetConfig_Params_STRUCT_SIZE;
        sc.pConfigs = mc;
        sc.numOfMetricConfig = nm;
        sc.deviceIndex = pc->device;
        if (!CUPTI(cuptiSassMetricsSetConfig(&sc))) return false;
        g_sass_devices.insert(pc->device);
    }
    CUpti_SassMetricsEnable_Params en;
    memset(&en, 0, sizeof en);
    en.structSize = CUpti_SassMetricsEnable_Params_STRUCT_SIZE;
    en.ctx = pc->ctx;
    en.enableLazyPatching = 1;
    if (!CUPTI(cuptiSassMetricsEnable(&en))) return false;
    vlog("SASS metrics enabled on device %u", pc->device);
    return true;
}

/* Hybrid mode reads the SASS metrics once, when the context ends (or at
 * exit), instead of after every launch (GPUPROF_SASS_FLUSH=launch). On the
 * H100 a flush after a launch left every later launch without records; a
 * flush while the process goes on launching is reported elsewhere to wedge
 * CUPTI. The counts then add up over launches and go out with launch id 0
 * (the collector places them at the function's calling context). */
bool sass_flush_at_end() {
    static const bool at_end = [] {
        const char *v = getenv("GPUPROF_SASS_FLUSH");
        return !v || strcmp(v, "launch") != 0;
    }();
    return at_end;
}

void sass_flush(PCtx *pc, uint64_t launch_id) {
    CUpti_SassMetricsGetDataProperties_Params dp;
    memset(&dp, 0, sizeof dp);
    dp.structSize = CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE;
    dp.ctx = pc->ctx;
    if (!CUPTI(cuptiSassMetricsGetDataProperties(&dp))) return;
    size_t nrec = dp.numOfPatchedInstructionRecords, ninst = dp.numOfInstances;
    vlog("SASS metrics after launch %llu: %zu records, %zu instances", (unsigned long long)launch_id, nrec, ninst);
    if (nrec == 0 || ninst == 0) return;
    // Room for one value per instance and configured metric, whichever way
    // CUPTI counts instances.
    const size_t per = ninst * (g_metric_thread != ~0ull ? 2 : 1);
    std::vector<CUpti_SassMetrics_Data> data(nrec);
    std::vector<CUpti_SassMetrics_InstanceValue> values(nrec * per);
    for (size_t i = 0; i < nrec; i++) {
        memset(&data[i], 0, sizeof data[i]);
        data[i].structSize = sizeof(CUpti_SassMetrics_Data);
        data[i].pInstanceValues = &values[i * per];
    }
    CUpti_SassMetricsFlushData_Params fp;
    memset(&fp, 0, sizeof fp);
    fp.structSize = CUpti_SassMetricsFlushData_Params_STRUCT_SIZE;
    fp.ctx = pc->ctx;
    fp.numOfInstances = ninst;
    fp.numOfPatchedInstructionRecords = nrec;
    fp.pMetricsData = data.data();
    if (!CUPTI(cuptiSassMetricsFlushData(&fp))) return;
    gpw_buf f;
    gpw_buf_init(&f);
    size_t off = gpw_instr_counts_begin(&f, launch_id);
    uint32_t count = 0;
    static bool logged = false;
    for (size_t i = 0; i < nrec; i++) {
        uint64_t inst = 0, thr = 0;
        bool matched = false;
        for (size_t k = 0; k < per; k++) {
            const CUpti_SassMetrics_InstanceValue &v = data[i].pInstanceValues[k];
            if (v.metricId == g_metric_inst) inst += v.value, matched = true;
            if (v.metricId == g_metric_thread) thr += v.value, matched = true;
        }
        if (!matched && ninst > 0) inst = data[i].pInstanceValues[0].value; // metric ids not echoed back
        if (!logged && (inst || i + 1 == nrec)) {
            logged = true;
            vlog("SASS metrics record: pcOffset %u metricId %llu value %llu (configured %llu, %llu)", data[i].pcOffset,
                 (unsigned long long)data[i].pInstanceValues[0].metricId,
                 (unsigned long long)data[i].pInstanceValues[0].value, (unsigned long long)g_metric_inst,
                 (unsigned long long)g_metric_thread);
        }
        uint32_t fid = function_for(data[i].cubinCrc, data[i].functionName);
        gpw_instr_count(&f, fid, data[i].pcOffset, inst, thr);
        count++;
        free((void *)data[i].functionName);
    }
    if (count && gpw_instr_counts_finish(&f, off, count))
        out_push(&f, true, count);
    else
        gpw_buf_free(&f);
}

/* GPUPROF_SASS_KERNEL: a substring of a kernel's name as CUPTI gives it at
 * the launch (mangled; a function's plain name is a substring of its
 * mangled one). Set, the SASS metrics are enabled at the first launch of a
 * kernel whose name contains it instead of at the context's first launch:
 * only the function launched when they are enabled gets counts on the H100
 * (docs/inject.md), and that is then this one. Unset or empty: the first
 * launch, whatever its kernel. */
const std::string &sass_kernel() {
    static const std::string k = [] {
        const char *v = getenv("GPUPROF_SASS_KERNEL");
        return std::string(v ? v : "");
    }();
    return k;
}

/* sass_sync waits for the context's work, so that a read sees the counts
 * of every launch made before it (the read at exit). */
void sass_sync(PCtx *pc) {
    if (cuCtxPushCurrent(pc->ctx) == CUDA_SUCCESS) {
        cuCtxSynchronize();
        CUcontext prev;
        cuCtxPopCurrent(&prev);
    }
}

/* sass_at_launch runs at a launch's API enter, before the launch, for a
 * context whose SASS metrics are pending; name is the kernel's (mangled)
 * name. Under g_sass_mu: two threads launching on one context at once
 * would otherwise both enable them. */
void sass_at_launch(PCtx *pc, const char *name) {
    const std::string fn = name ? name : "";
    std::lock_guard<std::mutex> lk(g_sass_mu);
    if (!pc->sass_pending) return; // enabled (or failed) by another thread's launch meanwhile
    const std::string &want = sass_kernel();
    if (!want.empty() && fn.find(want) == std::string::npos) return; // not the kernel asked for: still pending
    pc->sass_pending = false;
    pc->sass = setup_sass(pc);
    if (!pc->sass) {
        log("SASS metrics could not be enabled on this context");
        return;
    }
    vlog("SASS metrics enabled at the first launch of %s%s", fn.c_str(),
         want.empty() ? "" : " (GPUPROF_SASS_KERNEL)");
}

/* sass_unmatched says, where GPUPROF_SASS_KERNEL named no kernel that the
 * context launched, that it got no counts. */
void sass_unmatched(PCtx *pc) {
    if (!pc->sass_pending || sass_kernel().empty()) return;
    pc->sass_pending = false;
    log("GPUPROF_SASS_KERNEL=%s: no kernel launched on this context has it in its name; no instruction counts",
        sass_kernel().c_str());
}

/* ---- contexts ---- */

void on_context_created(CUcontext ctx) {
    uint32_t dev = 0;
    CUPTI(cuptiGetDeviceId(ctx, &dev));
    CUdevice d;
    if (cuDeviceGet(&d, (int)dev) == CUDA_SUCCESS) hello_from_device(d);
    PCtx *pc = new PCtx();
    pc->ctx = ctx;
    pc->device = dev;
    if (g_cfg.mode == GPW_MODE_PCSAMPLING && !pcs_claim((CUdevice)dev)) {
        // Another process samples this GPU: kernel times only.
    } else if (g_cfg.mode == GPW_MODE_PCSAMPLING) {
        const uint64_t t0 = stat_clock();
        pc->pcs = setup_pcsampling(pc);
        g_st_setup_ns += stat_clock() - t0;
        if (!pc->pcs) log("PC sampling could not be enabled on this context");
    } else if (g_cfg.mode == GPW_MODE_HYBRID) {
        // SASS metrics are enabled at the context's first launch (or the
        // first of GPUPROF_SASS_KERNEL's kernel, sass_at_launch): enabled in
        // the context-created callback (GPUPROF_SASS_AT=context, which
        // ignores GPUPROF_SASS_KERNEL) no launch got any record on the H100
        // (docs/inject.md).
        const char *at = getenv("GPUPROF_SASS_AT");
        if (!at || strcmp(at, "context") != 0) {
            pc->sass_pending = true;
        } else {
            pc->sass = setup_sass(pc);
            if (!pc->sass) log("SASS metrics could not be enabled on this context");
        }
    }
    vlog("context created on device %u: pcsampling=%d sass=%d", dev, pc->pcs ? 1 : 0, pc->sass ? 1 : 0);
    std::lock_guard<std::mutex> lk(g_mu);
    g_ctxs[ctx] = pc;
}

void on_context_destroy(CUcontext ctx) {
    PCtx *pc = nullptr;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = g_ctxs.find(ctx);
        if (it == g_ctxs.end()) return;
        pc = it->second;
        g_ctxs.erase(it);
    }
    finish_pcsampling(pc);
    {
        std::lock_guard<std::mutex> lk(g_sass_mu);
        sass_unmatched(pc);
    }
    if (pc->sass && sass_flush_at_end()) sass_flush(pc, 0);
    if (pc->sass) {
        CUpti_SassMetricsDisable_Params dp;
        memset(&dp, 0, sizeof dp);
        dp.structSize = CUpti_SassMetricsDisable_Params_STRUCT_SIZE;
        dp.ctx = ctx;
        cuptiSassMetricsDisable(&dp);
        pc->sass = false;
    }
    cuptiActivityFlushAll(1);
}

PCtx *ctx_state(CUcontext ctx) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_ctxs.find(ctx);
    return it == g_ctxs.end() ? nullptr : it->second;
}

/* ---- launches ---- */

void write_launch(uint64_t lid, uint32_t fid, const unsigned grid[3], const unsigned block[3], unsigned shared,
                  uint64_t stream, uint8_t flags, const uint64_t *frames, size_t nf) {
    gpw_launch_t L = {};
    L.launch_id = lid;
    L.function_id = fid;
    for (int i = 0; i < 3; i++) {
        L.grid[i] = grid[i];
        L.block[i] = block[i];
    }
    L.shared_bytes = shared;
    L.stream = stream;
    L.flags = flags;
    L.block_offset = 0;
    gpw_buf f;
    gpw_buf_init(&f);
    gpw_launch(&f, &L, frames, nf);
    out_push(&f, false, 0);
}

/* on_graph_launch keeps the host stack of a cuGraphLaunch for its kernels,
 * which come only as activity records carrying its correlation id. */
void on_graph_launch(const CUpti_CallbackData *cd) {
    if (cd->callbackSite != CUPTI_API_ENTER) return;
    uint64_t frames[kMaxHostFrames];
    size_t nf = host_backtrace(frames, kMaxHostFrames);
    GraphLaunch g;
    g.frames.assign(frames, frames + nf);
    if (cd->functionParams) g.stream = (uint64_t)(uintptr_t)((const cuGraphLaunch_params *)cd->functionParams)->hStream;
    std::lock_guard<std::mutex> lk(g_mu);
    g_graphs[cd->correlationId] = std::move(g);
}

/* graph_kernel gives a kernel of a graph launch its LAUNCH frame (flag
 * GPW_LAUNCH_GRAPH, the graph launch's host stack) and returns its launch
 * id, 0 if corr is not a graph launch. */
uint64_t graph_kernel(uint32_t corr, const GP_KERNEL_RECORD *k) {
    uint32_t fid = function_by_name(k->name);
    uint64_t lid, stream;
    std::vector<uint64_t> frames;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = g_graphs.find(corr);
        if (it == g_graphs.end()) return 0;
        lid = g_next_launch.fetch_add(1);
        it->second.first.emplace(fid, lid);
        frames = it->second.frames;
        stream = it->second.stream;
        g_launch_blocks[lid] = (uint64_t)k->gridX * k->gridY * k->gridZ;
    }
    const unsigned grid[3] = {(unsigned)k->gridX, (unsigned)k->gridY, (unsigned)k->gridZ};
    const unsigned block[3] = {(unsigned)k->blockX, (unsigned)k->blockY, (unsigned)k->blockZ};
    write_launch(lid, fid, grid, block, (unsigned)k->dynamicSharedMemory, stream, GPW_LAUNCH_GRAPH, frames.data(),
                 frames.size());
    return lid;
}

/* emit_launch writes the LAUNCH frame and says whether the launch is
 * observed: always, except under PC sampling ranges, where kernel sampling
 * chooses (the first instance of each calling context and every K-th, as
 * in the redundancy pass); a launch seen only after the fact (can_range
 * false) cannot be put in a range. */
bool emit_launch(uint32_t corr, uint32_t rt_corr, const char *name, const unsigned grid[3], const unsigned block[3],
                 unsigned shared, uint64_t stream, bool ranges, bool can_range) {
    uint64_t frames[kMaxHostFrames];
    size_t nf = host_backtrace(frames, kMaxHostFrames);
    uint32_t fid = function_by_name(name);
    bool sampled = true;
    if (ranges) sampled = can_range && kernel_sample(hash_frames(frames, nf) ^ ((uint64_t)fid * 0x9e3779b97f4a7c15ull));
    uint64_t lid = g_next_launch.fetch_add(1);
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (corr) g_corr[corr] = lid;
        if (rt_corr) g_corr[rt_corr] = lid;
        g_launch_blocks[lid] = grid[0] * grid[1] * grid[2];
    }
    write_launch(lid, fid, grid, block, shared, stream, sampled ? GPW_LAUNCH_TRACED : 0, frames, nf);
    return sampled;
}

uint64_t launch_of(uint32_t corr) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_corr.find(corr);
    return it == g_corr.end() ? 0 : it->second;
}

void on_driver_launch(CUpti_CallbackId cbid, const CUpti_CallbackData *cd) {
    if (cd->callbackSite == CUPTI_API_ENTER) {
        unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared = 0;
        uint64_t stream = 0;
        const void *p = cd->functionParams;
        switch (cbid) {
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
            const cuLaunchKernel_params *a = (const cuLaunchKernel_params *)p;
            grid[0] = a->gridDimX, grid[1] = a->gridDimY, grid[2] = a->gridDimZ;
            block[0] = a->blockDimX, block[1] = a->blockDimY, block[2] = a->blockDimZ;
            shared = a->sharedMemBytes;
            stream = (uint64_t)(uintptr_t)a->hStream;
            break;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
            const cuLaunchCooperativeKernel_params *a = (const cuLaunchCooperativeKernel_params *)p;
            grid[0] = a->gridDimX, grid[1] = a->gridDimY, grid[2] = a->gridDimZ;
            block[0] = a->blockDimX, block[1] = a->blockDimY, block[2] = a->blockDimZ;
            shared = a->sharedMemBytes;
            stream = (uint64_t)(uintptr_t)a->hStream;
            break;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
            const cuLaunchKernelEx_params *a = (const cuLaunchKernelEx_params *)p;
            if (a->config) {
                grid[0] = a->config->gridDimX, grid[1] = a->config->gridDimY, grid[2] = a->config->gridDimZ;
                block[0] = a->config->blockDimX, block[1] = a->config->blockDimY, block[2] = a->config->blockDimZ;
                shared = a->config->sharedMemBytes;
                stream = (uint64_t)(uintptr_t)a->config->hStream;
            }
            break;
        }
        default: return;
        }
        t_rt_seen = true;
        // Captured into a graph: it runs (and is listed) at the graph's launches.
        if (stream_capturing((CUstream)(uintptr_t)stream)) return;
        PCtx *pc = ctx_state(cd->context);
        const bool ranges = pc && pc->pcs && pc->pcs_ranges;
        if (emit_launch(cd->correlationId, t_rt_corr, cd->symbolName, grid, block, shared, stream, ranges, true) && ranges) {
            CUpti_PCSamplingStartParams sp;
            memset(&sp, 0, sizeof sp);
            sp.size = CUpti_PCSamplingStartParamsSize;
            sp.ctx = pc->ctx;
            if (CUPTI(cuptiPCSamplingStart(&sp))) t_pcs_started = pc;
        }
        // SASS metrics: enabled at the context's first launch (or the first
        // of GPUPROF_SASS_KERNEL's kernel).
        if (pc && pc->sass_pending) sass_at_launch(pc, cd->symbolName);
        return;
    }
    // API exit
    PCtx *pc = ctx_state(cd->context);
    if (!pc) return;
    if (t_pcs_started == pc) {
        t_pcs_started = nullptr;
        CUpti_PCSamplingStopParams sp;
        memset(&sp, 0, sizeof sp);
        sp.size = CUpti_PCSamplingStopParamsSize;
        sp.ctx = pc->ctx;
        CUPTI(cuptiPCSamplingStop(&sp));
    }
    if (pc->pcs) pcs_get(pc, !g_cfg.pc_serialized);
    if (pc->sass && !sass_flush_at_end()) {
        uint64_t lid = launch_of(cd->correlationId);
        cuCtxSynchronize();
        sass_flush(pc, lid);
    }
}

void on_runtime_launch(CUpti_CallbackId cbid, const CUpti_CallbackData *cd) {
    if (cd->callbackSite == CUPTI_API_ENTER) {
        t_rt_corr = cd->correlationId;
        t_rt_seen = false;
        return;
    }
    if (!t_rt_seen && cd->functionParams) {
        // The runtime launched without a driver launch callback we know: use
        // the runtime's parameters.
        unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared = 0;
        uint64_t stream = 0;
        if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
            cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000) {
            const cudaLaunchKernel_v7000_params *a = (const cudaLaunchKernel_v7000_params *)cd->functionParams;
            grid[0] = a->gridDim.x, grid[1] = a->gridDim.y, grid[2] = a->gridDim.z;
            block[0] = a->blockDim.x, block[1] = a->blockDim.y, block[2] = a->blockDim.z;
            shared = (unsigned)a->sharedMem;
            stream = (uint64_t)(uintptr_t)a->stream;
        } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 ||
                   cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060) {
            const cudaLaunchKernelExC_v11060_params *a = (const cudaLaunchKernelExC_v11060_params *)cd->functionParams;
            if (a->config) {
                grid[0] = a->config->gridDim.x, grid[1] = a->config->gridDim.y, grid[2] = a->config->gridDim.z;
                block[0] = a->config->blockDim.x, block[1] = a->config->blockDim.y, block[2] = a->config->blockDim.z;
                shared = (unsigned)a->config->dynamicSmemBytes;
                stream = (uint64_t)(uintptr_t)a->config->stream;
            }
        }
        if (grid[0] && !stream_capturing((CUstream)(uintptr_t)stream)) {
            PCtx *pc = ctx_state(cd->context);
            emit_launch(0, cd->correlationId, cd->symbolName, grid, block, shared, stream, pc && pc->pcs_ranges, false);
        }
    }
    t_rt_corr = 0;
    t_rt_seen = false;
}

void on_driver_memory(CUpti_CallbackId cbid, const CUpti_CallbackData *cd) {
    if (cd->callbackSite != CUPTI_API_EXIT || !cd->functionParams) return;
    if (cd->functionReturnValue && *(const CUresult *)cd->functionReturnValue != CUDA_SUCCESS) return;
    const void *p = cd->functionParams;
    uint64_t addr = 0, size = 0;
    uint8_t kind = GPW_ALLOC_DEVICE;
    bool is_free = false;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
        const cuMemAlloc_v2_params *a = (const cuMemAlloc_v2_params *)p;
        addr = a->dptr ? (uint64_t)*a->dptr : 0, size = a->bytesize;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
        const cuMemAllocManaged_params *a = (const cuMemAllocManaged_params *)p;
        addr = a->dptr ? (uint64_t)*a->dptr : 0, size = a->bytesize, kind = GPW_ALLOC_MANAGED;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
        const cuMemAllocPitch_v2_params *a = (const cuMemAllocPitch_v2_params *)p;
        addr = a->dptr ? (uint64_t)*a->dptr : 0, size = (a->pPitch ? *a->pPitch : a->WidthInBytes) * a->Height;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
        const cuMemAllocAsync_params *a = (const cuMemAllocAsync_params *)p;
        addr = a->dptr ? (uint64_t)*a->dptr : 0, size = a->bytesize, kind = GPW_ALLOC_ASYNC;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
        const cuMemAllocFromPoolAsync_params *a = (const cuMemAllocFromPoolAsync_params *)p;
        addr = a->dptr ? (uint64_t)*a->dptr : 0, size = a->bytesize, kind = GPW_ALLOC_ASYNC;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
        const cuMemHostAlloc_params *a = (const cuMemHostAlloc_params *)p;
        addr = a->pp ? (uint64_t)(uintptr_t)*a->pp : 0, size = a->bytesize, kind = GPW_ALLOC_HOST_PINNED;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
        const cuMemAllocHost_v2_params *a = (const cuMemAllocHost_v2_params *)p;
        addr = a->pp ? (uint64_t)(uintptr_t)*a->pp : 0, size = a->bytesize, kind = GPW_ALLOC_HOST_PINNED;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        addr = (uint64_t)((const cuMemFree_v2_params *)p)->dptr, is_free = true;
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        addr = (uint64_t)((const cuMemFreeAsync_params *)p)->dptr, is_free = true;
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
        addr = (uint64_t)(uintptr_t)((const cuMemFreeHost_params *)p)->p, is_free = true;
        break;
    default: return;
    }
    gpw_buf f;
    gpw_buf_init(&f);
    if (is_free) {
        gpw_free(&f, addr);
    } else {
        uint64_t frames[kMaxHostFrames];
        size_t nf = host_backtrace(frames, kMaxHostFrames);
        gpw_alloc(&f, new_alloc_id(), addr, size, kind, frames, nf);
    }
    out_push(&f, false, 0);
}

/* ---- activity ---- */

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 1u << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    CUpti_Activity *rec = nullptr;
    while (buffer && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const GP_KERNEL_RECORD *k = (const GP_KERNEL_RECORD *)rec;
        uint64_t lid = launch_of(k->correlationId);
        if (lid == 0) lid = graph_kernel(k->correlationId, k);
        if (lid == 0) {
            vlog("kernel record %u without a known launch", k->correlationId);
            continue;
        }
        uint32_t blocks = (uint32_t)k->gridX * (uint32_t)k->gridY * (uint32_t)k->gridZ;
        gpw_buf f;
        gpw_buf_init(&f);
        gpw_kernel_end(&f, lid, k->start + g_ts_offset, k->end + g_ts_offset, blocks, blocks, 0, 0);
        out_push(&f, false, 0);
    }
    free(buffer);
    emit_graph_pcs(false);
}

void CUPTIAPI callback(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *cbdata) {
    if (t_depth > 0) return;
    t_depth++;
    switch (domain) {
    case CUPTI_CB_DOMAIN_RESOURCE: {
        const CUpti_ResourceData *rd = (const CUpti_ResourceData *)cbdata;
        switch (cbid) {
        case CUPTI_CBID_RESOURCE_CONTEXT_CREATED: on_context_created(rd->context); break;
        case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING: on_context_destroy(rd->context); break;
        case CUPTI_CBID_RESOURCE_MODULE_LOADED: {
            on_module_loaded(rd);
            host_modules_scan();
            PCtx *pc = ctx_state(rd->context);
            if (pc) pcs_get(pc);
            break;
        }
        case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
            PCtx *pc = ctx_state(rd->context);
            if (pc) pcs_get(pc);
            break;
        }
        default: break;
        }
        break;
    }
    case CUPTI_CB_DOMAIN_DRIVER_API: {
        const CUpti_CallbackData *cd = (const CUpti_CallbackData *)cbdata;
        switch (cbid) {
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: on_driver_launch(cbid, cd); break;
        case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
        case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: on_graph_launch(cd); break;
        default: on_driver_memory(cbid, cd); break;
        }
        break;
    }
    case CUPTI_CB_DOMAIN_RUNTIME_API: on_runtime_launch(cbid, (const CUpti_CallbackData *)cbdata); break;
    default: break;
    }
    t_depth--;
}

} // namespace

bool cupti_init() {
    const uint64_t t0 = stat_clock();
    struct Acc {
        uint64_t t0;
        ~Acc() { g_st_init_ns += stat_clock() - t0; }
    } acc{t0};
    CUptiResult r = cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)callback, nullptr);
    if (r != CUPTI_SUCCESS) {
        cupti_ok(r, "cuptiSubscribe");
        log("CUPTI is taken (another profiler or the Sanitizer in this process?): no GPU data");
        return false;
    }
    bool ok = true;
    const CUpti_CallbackId res[] = {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
                                    CUPTI_CBID_RESOURCE_MODULE_LOADED, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING};
    for (CUpti_CallbackId id : res) ok &= CUPTI(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE, id));
    const CUpti_CallbackId drv[] = {
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,            CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,       CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,     CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,        CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
        CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,           CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,            CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    };
    for (CUpti_CallbackId id : drv) ok &= CUPTI(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, id));
    const CUpti_CallbackId rt[] = {
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    };
    for (CUpti_CallbackId id : rt) ok &= CUPTI(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RUNTIME_API, id));
    ok &= CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    // Kernel activity gives the durations; in hybrid mode it zeroes the SASS
    // metrics' counts on the H100 (docs/inject.md), so there it is off
    // unless GPUPROF_KERNEL_ACTIVITY=1 (and the durations come from the PC
    // sampling pass of --mode all).
    const char *act = getenv("GPUPROF_KERNEL_ACTIVITY");
    bool activity = act ? strcmp(act, "0") != 0 : g_cfg.mode != GPW_MODE_HYBRID;
    if (activity) ok &= CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    uint64_t ts = 0;
    if (cuptiGetTimestamp(&ts) == CUPTI_SUCCESS) g_ts_offset = (int64_t)(now_ns() - ts);
    vlog("%s mode: CUPTI subscribed, kernel record %s", g_cfg.mode == GPW_MODE_HYBRID ? "hybrid" : "pcsampling",
         GP_STR(GP_KERNEL_RECORD));
    return ok;
}

void cupti_atexit() {
    std::vector<PCtx *> ctxs;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        for (auto &kv : g_ctxs) ctxs.push_back(kv.second);
    }
    for (PCtx *pc : ctxs) {
        finish_pcsampling(pc);
        {
            std::lock_guard<std::mutex> lk(g_sass_mu);
            sass_unmatched(pc);
        }
        if (pc->sass && sass_flush_at_end()) {
            // The context outlived the application's code: finish its work,
            // then read the counts once.
            sass_sync(pc);
            sass_flush(pc, 0);
            pc->sass = false;
        }
    }
    cuptiActivityFlushAll(1);
    emit_graph_pcs(true);
    if (g_cfg.verbose || g_cfg.stats)
        log("cupti: subscribe %.3f s, PC sampling set-up %.3f s, %llu reads of samples %.3f s, final read and disable %.3f s",
            g_st_init_ns.load() / 1e9, g_st_setup_ns.load() / 1e9, (unsigned long long)g_st_get_n.load(),
            g_st_get_ns.load() / 1e9, g_st_finish_ns.load() / 1e9);
}

} // namespace gp
