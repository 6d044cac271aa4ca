/*
 * A C library built without frame pointers (-O2 -fomit-frame-pointer,
 * see sampler/build.rs), as distribution libraries are: the CFI tests
 * sample stacks that run through it and back into Rust.
 *
 * Both functions keep more values live than there are other callee-saved
 * registers, so the compiler also allocates %rbp (x86_64) to data: a
 * frame-pointer walk that reaches them reads garbage, as it does in a
 * real frameless library. objdump -d shows `push %rbp` without
 * `mov %rsp,%rbp`.
 */
#include <stdint.h>

typedef uint64_t (*noframes_callback)(uint64_t);

/* Leaf work: eight interleaved multiply-xorshift chains. */
__attribute__((noinline)) uint64_t noframes_spin(uint64_t iters, uint64_t seed)
{
    uint64_t a = seed | 1, b = seed ^ 0x9e3779b97f4a7c15u, c = seed + 3, d = seed * 5;
    uint64_t e = seed ^ 0xbf58476d1ce4e5b9u, f = seed + 7, g = ~seed, h = seed << 1;
    for (uint64_t i = 0; i < iters; i++) {
        a = a * 0x5851f42d4c957f2du + b;
        b ^= a >> 29;
        c = c * 0x2545f4914f6cdd1du + d;
        d ^= c >> 31;
        e = e * 0x9e3779b97f4a7c15u + f;
        f ^= e >> 27;
        g = g * 0xbf58476d1ce4e5b9u + h;
        h ^= g >> 30;
        __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h));
    }
    return a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
}

/*
 * Calls back into Rust `rounds` times, with `iters` of leaf work in C
 * before each call. Seven accumulators stay live across the calls, which
 * needs every callee-saved register, %rbp included.
 */
__attribute__((noinline)) uint64_t noframes_call(noframes_callback cb, uint64_t rounds, uint64_t iters)
{
    uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7;
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t x = noframes_spin(iters, a ^ r);
        uint64_t y = cb(x ^ b);
        a += y; b ^= a; c += b * 3; d ^= c; e += d; f ^= e * 5; g += f ^ x;
        __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g));
    }
    return a ^ b ^ c ^ d ^ e ^ f ^ g;
}

/*
 * noframes_call below a frame of more than 8 KiB (a large local buffer,
 * as std::io::copy's 8 KiB one or a C parser's), still without a frame
 * pointer: the return address into the caller lies that far above the
 * leaf's stack pointer, so a walk only gets past this frame if the stack
 * copy it unwinds reaches that far. The buffer is used after the call, so
 * the call is not a tail call.
 */
__attribute__((noinline)) uint64_t noframes_big_frame(noframes_callback cb, uint64_t rounds, uint64_t iters)
{
    volatile uint8_t buf[10 * 1024];
    buf[0] = (uint8_t)rounds;
    buf[sizeof buf - 1] = (uint8_t)iters;
    uint64_t r = noframes_call(cb, rounds, iters);
    return r + buf[0] + buf[sizeof buf - 1];
}
