// Work shared by the threads of one parallel section, in phases that must finish one after another (a layer's
// o projection before its RMSNorm, the MLP's gate/up before its down product), without opening a parallel section
// per phase. Used by the extension ops (q4_matmul.cpp, layer_f32.hpp); an experiment, the engine does not use it.
//
// Each phase is a count of chunks, claimed one at a time from an atomic counter by whichever thread is free; a
// thread that finds none left waits until every claimed chunk is done. That wait is only ever for chunks another
// thread has claimed and is running, so a phase ends even when the section's iterations run one after another on
// one thread (TBB, behind ov::parallel_nt, does not guarantee they run at once), and a second thread that wakes late
// simply takes fewer chunks instead of holding the first one up at the end. Which thread computes a chunk changes
// no result: each chunk's outputs are computed in a fixed order of their own (block_f32.hpp).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

namespace specchat {

// Outputs a chunk of a weight product of n outputs split among `threads`: one chunk a thread, a multiple of 4. Inside
// OpenVINO's CPU plugin (capped at AVX2, 2 threads, a decode step) that beat ~16 chunks of at least 64 outputs: a
// layer op 118 against 138 us a call, q/k/v 21 against 27 us (each thread's weights one run for the prefetch).
inline int64_t chunk_outputs(int64_t n, int64_t threads) { return std::max<int64_t>(4, (n / threads + 3) / 4 * 4); }

class Chunks {
public:
    explicit Chunks(int64_t count) : m_count(count) {}

    // Calls body(i) for chunks i in [0, count) that this thread claims, then returns once every chunk is done.
    template <class Body>
    void run(const Body& body) {
        for (int64_t i; (i = m_next.fetch_add(1, std::memory_order_relaxed)) < m_count;) {
            body(i);
            m_done.fetch_add(1, std::memory_order_release);
        }
        for (int spins = 0; m_done.load(std::memory_order_acquire) < m_count; ++spins) {
            if (spins < 4096) _mm_pause();
            else std::this_thread::yield();  // the other thread was descheduled mid-chunk
        }
    }

private:
    const int64_t m_count;
    std::atomic<int64_t> m_next{0}, m_done{0};
};

}  // namespace specchat
