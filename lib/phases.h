// lib/phases.h: -P N, where a training step's time goes: data, forward, backward, norm,
// update, every N-th step, on the step's line and in the metrics log, each also a range
// for a profiler. The clock is the host's in a CPU program and CUDA events in a CUDA one
// (a program that includes lib/cuda_utils.h first gets the GPU's).
#ifndef LIB_PHASES_H
#define LIB_PHASES_H
#include <stdio.h>
#include "utils.h"

// The phases of a training step that -P times (phases_enter, below)
enum { PHASE_DATA, PHASE_FORWARD, PHASE_BACKWARD, PHASE_NORM, PHASE_UPDATE, NUM_PHASES };
static const char *const PHASE_NAMES[NUM_PHASES] = {"data", "forward", "backward", "norm", "update"};

#ifdef LIB_CUDA_UTILS_H

// -P's clock on the GPU: CUDA events. A kernel launch returns as soon as the kernel is
// queued, so the host's clock read between two launches times the queueing, not the
// kernels; the wait for them shows up later, in whichever call first needs a result (a copy
// back to the host, a synchronisation), and is charged to that phase instead. An event
// recorded on the stream at each mark is stamped by the GPU when everything queued before
// it is done: the time between two events is the GPU's time for the work queued between
// the marks. Reading them waits for the last one, once per measured step (a step with more
// than PHASE_MARKS marks is read, and waited for, every PHASE_MARKS). -P's first report
// prints the host's clock beside the events' to show the difference.
#define PHASE_MARKS 64
typedef struct {
    cudaStream_t stream;                        // where the program's work is queued (0: the default stream)
    cudaEvent_t start, events[PHASE_MARKS];     // the step's start, and its marks so far
    int phase[PHASE_MARKS], n, created;
    double ms[NUM_PHASES];                      // the marks read so far, per phase
} PhaseClock;
static inline void phase_clock_start(PhaseClock *c) {
    if (!c->created) {
        cudaCheck(cudaEventCreate(&c->start));
        for (int i = 0; i < PHASE_MARKS; i++) { cudaCheck(cudaEventCreate(&c->events[i])); }
        c->created = 1;
    }
    for (int k = 0; k < NUM_PHASES; k++) { c->ms[k] = 0.0; }
    c->n = 0;
    // a timed step starts on an idle GPU (the step before may have left its update queued)
    // and ends on one (phase_clock_read): its time is its own, none of a neighbour's
    cudaCheck(cudaStreamSynchronize(c->stream));
    cudaCheck(cudaEventRecord(c->start, c->stream));
}
// the marks so far into ms; the last becomes the new start
static inline void phase_clock_collect(PhaseClock *c) {
    if (c->n == 0) { return; }
    cudaCheck(cudaEventSynchronize(c->events[c->n - 1]));
    cudaEvent_t before = c->start;
    for (int i = 0; i < c->n; i++) {
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, before, c->events[i]));
        c->ms[c->phase[i]] += ms;
        before = c->events[i];
    }
    cudaEvent_t last = c->events[c->n - 1];
    c->events[c->n - 1] = c->start;
    c->start = last;
    c->n = 0;
}
static inline void phase_clock_mark(PhaseClock *c, int phase) {
    if (c->n == PHASE_MARKS) { phase_clock_collect(c); }
    c->phase[c->n] = phase;
    cudaCheck(cudaEventRecord(c->events[c->n], c->stream));
    c->n++;
}
// 1: the GPU's times, in ms
static inline int phase_clock_read(PhaseClock *c, double *ms) {
    phase_clock_collect(c);
    for (int k = 0; k < NUM_PHASES; k++) { ms[k] = c->ms[k]; }
    return 1;
}
// ... and a profiler's ranges: NVTX (header-only NVTX v3, in the CUDA toolkit), named spans of
// the host's time that Nsight Systems draws on its timeline with the kernels launched in them
static inline void range_push(const char *name) { nvtxRangePushA(name); }
static inline void range_pop(void) { nvtxRangePop(); }

#else

// -P's clock on the CPU is the host's own: a call returns when its work is done, so the
// time between two marks is the time of what ran between them.
typedef struct { int unused; } PhaseClock;
static inline void phase_clock_start(PhaseClock *c) { (void)c; }
static inline void phase_clock_mark(PhaseClock *c, int phase) { (void)c; (void)phase; }
// 0: no clock of its own (the host's times are the phases')
static inline int phase_clock_read(PhaseClock *c, double *ms) { (void)c; (void)ms; return 0; }
// ... and a profiler's ranges: none on the CPU (perf and gprof see the functions themselves)
static inline void range_push(const char *name) { (void)name; }
static inline void range_pop(void) {}

#endif

// Where a training step's time goes (-P N: every N-th step, on the step's line and in the
// metrics log): loading the data, the forward pass, the backward pass, the gradient's norm
// (and clipping), the optimizer's update (and zeroing the gradients). phases_enter(p, X)
// says that what runs from here to the next phases_enter (or to phases_end) is phase X: the
// phases follow one another, so they add up to the step, and a step's micro-batches add up
// their passes. The clock is phase_clock's: the host's on the CPU, the GPU's events on the
// GPU. Every step and phase is also a range for a profiler (range_push: NVTX on the GPU, so
// that Nsight Systems shows the step's structure; nothing on the CPU), timed or not.
typedef struct {
    int every;                  // -P: measure every this many steps (0: never)
    int on;                     // measuring the current step
    int current;                // the phase running now (-1: none yet)
    int device;                 // ms is the device's own clock's (the GPU's), not the host's
    int shown;                  // (the host's clock has been shown beside the device's)
    double ms[NUM_PHASES];      // each phase's milliseconds
    double host_ms[NUM_PHASES]; // ... by the host's clock, read at each boundary without waiting
    double host_last;           // the host's clock at the last boundary
    PhaseClock clock;
} Phases;

// a step begins (step counts from 0: -P N measures steps N, 2N, ...)
static inline void phases_begin(Phases *p, int step) {
    char name[32];
    snprintf(name, sizeof(name), "step %d", step + 1);
    range_push(name);
    p->current = -1;
    p->on = p->every > 0 && (step + 1) % p->every == 0;
    if (!p->on) { return; }
    for (int k = 0; k < NUM_PHASES; k++) { p->ms[k] = p->host_ms[k] = 0.0; }
    phase_clock_start(&p->clock);
    p->host_last = wall_seconds();
}
// the phase that was running (if any) ends here
static inline void phases_close(Phases *p) {
    if (p->current < 0) { return; }
    range_pop();
    if (p->on) {
        double now = wall_seconds();
        p->host_ms[p->current] += 1e3 * (now - p->host_last);
        p->host_last = now;
        phase_clock_mark(&p->clock, p->current);
    }
    p->current = -1;
}
static inline void phases_enter(Phases *p, int phase) {
    phases_close(p);
    range_push(PHASE_NAMES[phase]);
    p->current = phase;
}
// the step is done: read the device's clock (waiting for it)
static inline void phases_end(Phases *p) {
    phases_close(p);
    range_pop(); // (the step's)
    if (!p->on) { return; }
    p->device = phase_clock_read(&p->clock, p->ms);
    if (!p->device) {
        for (int k = 0; k < NUM_PHASES; k++) { p->ms[k] = p->host_ms[k]; }
    }
}
static inline double phases_sum(const double *ms) {
    double sum = 0.0;
    for (int k = 0; k < NUM_PHASES; k++) { sum += ms[k]; }
    return sum;
}
// The reports (marked unused: train_mlp prints a mean per epoch its own way, finetune_lora
// writes its own columns, and neither compiler may warn of them).
// on the step's line: " | data 0.1 forward 20.5 ... ms (sum 41.0 of the step's 41.0)", the
// step's time as the program measured it for its line
__attribute__((unused)) static inline void phases_print(const Phases *p, double step_ms) {
    if (!p->on) { return; }
    printf(" |");
    for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.1f", PHASE_NAMES[k], p->ms[k]); }
    printf(" ms (sum %.1f of the step's %.1f)", phases_sum(p->ms), step_ms);
}
// once, on a line of its own, where the device has its own clock: what the host's said
__attribute__((unused)) static inline void phases_print_host(Phases *p) {
    if (!p->on || !p->device || p->shown) { return; }
    p->shown = 1;
    printf("  (-P: those are the GPU's times, from events; the host's clock, read at the same marks without"
           " waiting for the GPU, says");
    for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.1f", PHASE_NAMES[k], p->host_ms[k]); }
    printf(" ms: a phase whose kernels were only queued looks short, and the wait for them is charged to"
           " the first call that needs a result)\n");
}
// key:value fields for a metrics log line: ms_data:... and, with a device clock, host_ms_data:...
__attribute__((unused)) static inline void phases_log(const Phases *p, FILE *f) {
    if (!p->on || f == NULL) { return; }
    for (int k = 0; k < NUM_PHASES; k++) { fprintf(f, " ms_%s:%.3f", PHASE_NAMES[k], p->ms[k]); }
    if (p->device) {
        for (int k = 0; k < NUM_PHASES; k++) { fprintf(f, " host_ms_%s:%.3f", PHASE_NAMES[k], p->host_ms[k]); }
    }
}

#endif // LIB_PHASES_H
