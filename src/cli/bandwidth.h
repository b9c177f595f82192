/*
 * bandwidth.h — the machine's memory read bandwidth with a given number of threads, for
 * benchmarks that report how close a decoder runs to the memory speed of light.
 *
 * bench-kernels has its own copy (static in cmd_bench_kernels.c: whole-buffer passes on the
 * thread pool); both read with nx_matmul_stream_read, the matmul kernels' widest loads. This
 * one is built for a shared machine, where whole passes are spoilt by preemption and the
 * pool's straggler fallback (the caller then reads alone) turns a preempted 2-thread pass
 * into a 1-thread figure: its own threads sweep the buffer in chunks of 32 MiB, meeting at a
 * barrier after each chunk, every chunk is timed on every pass, and the figure uses each
 * chunk's fastest pass. It measures what n threads that actually run side by side get from
 * DRAM (the buffer is far larger than the last-level cache and is swept in order).
 * Never: keep the buffer or the threads after returning, print.
 */
#ifndef NX_CLI_BANDWIDTH_H
#define NX_CLI_BANDWIDTH_H

#include <stddef.h>

/* GB/s (1e9 bytes/s) reading a `bytes` buffer (should be several times the last-level cache)
 * with n_threads threads, over `passes` timed passes after one warm-up pass: total bytes / sum
 * over chunks of the chunk's fastest time. 0 if the buffer or the threads cannot be had. */
double nx_cli_read_bandwidth(int n_threads, size_t bytes, int passes);

/* Anonymous memory advised for transparent huge pages, as the weights get (gguf: 2 MiB-aligned
 * views / --no-mmap copies), so bandwidth and kernel figures compare like with like.
 * NULL on failure; free with nx_cli_huge_free and the same size. */
void *nx_cli_huge_alloc(size_t bytes);
void  nx_cli_huge_free(void *p, size_t bytes);

#endif
