/*
 * passes.h - entry points of the two measurement passes. A process runs one:
 * the Sanitizer API and CUPTI cannot both subscribe (see docs/inject.md).
 */
#ifndef GPUPROF_PASSES_H
#define GPUPROF_PASSES_H

namespace gp {

// Redundancy mode (sanitizer_pass.cpp): subscribe to the Sanitizer API.
bool sanitizer_init();
void sanitizer_atexit();

// pcsampling and hybrid modes (cupti_pass.cpp): subscribe to CUPTI.
bool cupti_init();
void cupti_atexit();

} // namespace gp

#endif
