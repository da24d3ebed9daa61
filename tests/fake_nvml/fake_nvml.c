/*
 * A fake libnvidia-ml.so for carma's tests: the NVML entry points carma
 * calls, answering from a text file instead of a driver, so the real
 * daemon's NVML backend runs on machines without a GPU.
 *
 * The file is named by $CARMA_FAKE_NVML and re-read on every call, so a
 * test changes the GPUs while the daemon runs by rewriting it (atomically,
 * by rename). One `key value` per line; per-GPU keys carry the GPU's index:
 *
 *   gpus 2                      number of GPUs
 *   driver 550.54.15            driver version
 *   driver_not_loaded 1         nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED
 *   0.name NVIDIA A100          0.uuid GPU-...
 *   0.total_mib 40960           0.used_mib 1024
 *   0.reserved_mib 616          memory the driver sets aside (NVML v2's reserved)
 *   0.util 35                   utilization counter, percent
 *   0.gpm_sm 42.5               GPM SM utilization, percent (GPM supported)
 *   0.gpm_occ 30                GPM SM occupancy, percent
 *   0.gpm_dram 20               GPM DRAM bandwidth utilization, percent
 *   0.power_w 120.5             0.energy_j 1234.5
 *   0.temp_c 61                 0.sm_clock_mhz 1410
 *   0.procs 123:512,456:1024    compute processes, pid:MiB
 *   0.mps_procs 789:256         MPS client processes, pid:MiB
 *   0.mig 1                     MIG mode (0 or 1)
 *   0.fail 1                    every call on the GPU: NVML_ERROR_GPU_IS_LOST
 *
 * A per-GPU value that is absent makes its call return
 * NVML_ERROR_NOT_SUPPORTED, as a real GPU does for what it cannot measure.
 * Entry points carma does not call are not exported: nvml-wrapper resolves
 * symbols at load time but fails only when a missing one is called.
 *
 * Struct layouts follow nvml.h (as bound by nvml-wrapper-sys 0.10).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;
typedef struct fake_gpm_sample *nvmlGpmSample_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
};

enum { GPM_GRAPHICS_UTIL = 1, GPM_SM_UTIL = 2, GPM_SM_OCCUPANCY = 3, GPM_DRAM_BW_UTIL = 10 };

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[210];
} nvmlGpmMetricsGet_t;

/* A sample's values; -1 where the GPU has no such metric. */
struct fake_gpm_sample {
    double sm_util;
    double occupancy;
    double dram;
};

static const unsigned long long MIB = 1024ULL * 1024ULL;
static int initialised;

/* Copies the value of `key` into `out`; 1 when the file has the key. */
static int lookup(const char *key, char *out, size_t size) {
    const char *path = getenv("CARMA_FAKE_NVML");
    if (path == NULL) {
        return 0;
    }
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        return 0;
    }
    char line[4096];
    size_t key_len = strlen(key);
    int found = 0;
    while (fgets(line, sizeof line, file) != NULL) {
        if (strncmp(line, key, key_len) == 0 && (line[key_len] == ' ' || line[key_len] == '\t')) {
            const char *value = line + key_len;
            while (*value == ' ' || *value == '\t') {
                value++;
            }
            size_t len = strcspn(value, "\r\n");
            if (len >= size) {
                len = size - 1;
            }
            memcpy(out, value, len);
            out[len] = '\0';
            found = 1;
            break;
        }
    }
    fclose(file);
    return found;
}

static int gpu_text(unsigned gpu, const char *key, char *out, size_t size) {
    char name[64];
    snprintf(name, sizeof name, "%u.%s", gpu, key);
    return lookup(name, out, size);
}

static int gpu_number(unsigned gpu, const char *key, double *value) {
    char text[64];
    if (!gpu_text(gpu, key, text, sizeof text)) {
        return 0;
    }
    *value = strtod(text, NULL);
    return 1;
}

static unsigned gpu_count(void) {
    char text[32];
    return lookup("gpus", text, sizeof text) ? (unsigned)strtoul(text, NULL, 10) : 0;
}

/* The GPU a handle stands for, or the error a call on it returns. */
static nvmlReturn_t device_index(nvmlDevice_t device, unsigned *gpu) {
    if (!initialised) {
        return NVML_ERROR_UNINITIALIZED;
    }
    uintptr_t raw = (uintptr_t)device;
    if (raw == 0 || raw > gpu_count()) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *gpu = (unsigned)(raw - 1);
    double fail = 0;
    if (gpu_number(*gpu, "fail", &fail) && fail != 0) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    return NVML_SUCCESS;
}

#define DEVICE(device, gpu)                                                                        \
    unsigned gpu;                                                                                  \
    do {                                                                                           \
        nvmlReturn_t status_ = device_index((device), &gpu);                                       \
        if (status_ != NVML_SUCCESS) {                                                             \
            return status_;                                                                        \
        }                                                                                          \
    } while (0)

static nvmlReturn_t copy_text(unsigned gpu, const char *key, char *out, unsigned size) {
    char text[256];
    if (!gpu_text(gpu, key, text, sizeof text)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (strlen(text) + 1 > size) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    strcpy(out, text);
    return NVML_SUCCESS;
}

/* Fills `infos` from a `pid:MiB,pid:MiB` list, NVML's count protocol. */
static nvmlReturn_t processes(unsigned gpu, const char *key, unsigned *count,
                              nvmlProcessInfo_t *infos) {
    char text[4096];
    nvmlProcessInfo_t found[256];
    unsigned n = 0;
    if (gpu_text(gpu, key, text, sizeof text)) {
        char *rest = text;
        char *item;
        while ((item = strtok_r(rest, ",", &rest)) != NULL && n < 256) {
            char *colon = strchr(item, ':');
            if (colon == NULL) {
                continue;
            }
            found[n].pid = (unsigned)strtoul(item, NULL, 10);
            found[n].usedGpuMemory = strtoull(colon + 1, NULL, 10) * MIB;
            found[n].gpuInstanceId = 0xFFFFFFFF;
            found[n].computeInstanceId = 0xFFFFFFFF;
            n++;
        }
    }
    if (infos == NULL || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(infos, found, n * sizeof found[0]);
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    char text[32];
    if (getenv("CARMA_FAKE_NVML") == NULL ||
        (lookup("driver_not_loaded", text, sizeof text) && strcmp(text, "0") != 0)) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    initialised = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    initialised = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length) {
    char text[80];
    if (!lookup("driver", text, sizeof text)) {
        strcpy(text, "0.0 (fake)");
    }
    if (strlen(text) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    strcpy(version, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialised) {
        return NVML_ERROR_UNINITIALIZED;
    }
    *count = gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (!initialised) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (index >= gpu_count()) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = (nvmlDevice_t)(uintptr_t)(index + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length) {
    DEVICE(device, gpu);
    return copy_text(gpu, "uuid", uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length) {
    DEVICE(device, gpu);
    return copy_text(gpu, "name", name, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE(device, gpu);
    double total = 0, used = 0, reserved = 0;
    if (!gpu_number(gpu, "total_mib", &total)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    gpu_number(gpu, "used_mib", &used);
    /* What the driver sets aside, apart from used and free as in NVML's
     * v2 structure: 616 MiB on an idle H200 with driver 580, where used
     * was 0 (docs/measured-h200.md). */
    gpu_number(gpu, "reserved_mib", &reserved);
    memory->total = (unsigned long long)total * MIB;
    memory->used = (unsigned long long)used * MIB;
    memory->reserved = (unsigned long long)reserved * MIB;
    unsigned long long taken = memory->used + memory->reserved;
    memory->free = memory->total > taken ? memory->total - taken : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE(device, gpu);
    double util = 0;
    if (!gpu_number(gpu, "util", &util)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    utilization->gpu = (unsigned)util;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned *milliwatts) {
    DEVICE(device, gpu);
    double watts = 0;
    if (!gpu_number(gpu, "power_w", &watts)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *milliwatts = (unsigned)(watts * 1000.0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *millijoules) {
    DEVICE(device, gpu);
    double joules = 0;
    if (!gpu_number(gpu, "energy_j", &joules)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *millijoules = (unsigned long long)(joules * 1000.0);
    return NVML_SUCCESS;
}

/* Any sensor reads the one temperature; any clock type the SM clock. */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned sensor, unsigned *celsius) {
    DEVICE(device, gpu);
    double value = 0;
    (void)sensor;
    if (!gpu_number(gpu, "temp_c", &value)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *celsius = (unsigned)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned type, unsigned *mhz) {
    DEVICE(device, gpu);
    double value = 0;
    (void)type;
    if (!gpu_number(gpu, "sm_clock_mhz", &value)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *mhz = (unsigned)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned *count,
                                                     nvmlProcessInfo_t *infos) {
    DEVICE(device, gpu);
    return processes(gpu, "procs", count, infos);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned *count,
                                                        nvmlProcessInfo_t *infos) {
    DEVICE(device, gpu);
    return processes(gpu, "mps_procs", count, infos);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned *current, unsigned *pending) {
    DEVICE(device, gpu);
    double mig = 0;
    if (!gpu_number(gpu, "mig", &mig)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *current = *pending = mig != 0;
    return NVML_SUCCESS;
}

/* MIG: a GPU in MIG mode has the 7 slots of an A100, all empty (the fake
 * makes no instances), as a GPU partitioned by nobody reads. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned *count) {
    DEVICE(device, gpu);
    double mig = 0;
    *count = gpu_number(gpu, "mig", &mig) && mig != 0 ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index,
                                                 nvmlDevice_t *mig) {
    DEVICE(device, gpu);
    (void)index;
    (void)mig;
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    DEVICE(device, gpu);
    double sm = 0;
    support->isSupportedDevice = gpu_number(gpu, "gpm_sm", &sm);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    *sample = calloc(1, sizeof **sample);
    return *sample == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    free(sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    DEVICE(device, gpu);
    if (!gpu_number(gpu, "gpm_sm", &sample->sm_util)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (!gpu_number(gpu, "gpm_occ", &sample->occupancy)) {
        sample->occupancy = -1;
    }
    if (!gpu_number(gpu, "gpm_dram", &sample->dram)) {
        sample->dram = -1;
    }
    return NVML_SUCCESS;
}

/* The metrics "between" two samples: the later sample's value. */
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    if (request->sample1 == NULL || request->sample2 == NULL || request->numMetrics > 210) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &request->metrics[i];
        memset(&metric->metricInfo, 0, sizeof metric->metricInfo);
        double value = -1;
        if (metric->metricId == GPM_SM_UTIL || metric->metricId == GPM_GRAPHICS_UTIL) {
            value = request->sample2->sm_util;
        } else if (metric->metricId == GPM_SM_OCCUPANCY) {
            value = request->sample2->occupancy;
        } else if (metric->metricId == GPM_DRAM_BW_UTIL) {
            value = request->sample2->dram;
        }
        metric->value = value < 0 ? 0 : value;
        metric->nvmlReturn = value < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}
