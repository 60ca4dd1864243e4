// tests/gpu/test_gpu_fold.cu: the fused reduction kernels (mdring/cuda/reduce.cuh)
// against the host path's reducer and a float64 reference.
//
//   every built-in op (sum prod min max avg) on int8 uint8 int16 uint16 int32 uint32
//   int64 uint64 float double half bfloat16; 1, 2, 3, 8, 64 and 67 inputs (67: two
//   launches); counts 0, 1, 13, 97, 4099, 2^18 + 3; pointers aligned, all misaligned
//   by one element (vector path after a head), misaligned differently (element by
//   element), and in place (dst is input 0); avg finalized and not.
// Up to 64 inputs the result must equal host_reducer's bit for bit (same order,
// same accumulator, one rounding); otherwise and for floats also within the
// float64 bound. A user op (bitwise xor, __host__ __device__) and a count above
// 2^31 elements are checked too.
//
// test_gpu_fold --emulate needs no GPU (CI runs it): every case but the 2^31 one
// runs the kernels' own code on the host. fold goes through the same
// detail::fold_with (copy or passes, the aliasing rule) and detail::fold_pass
// (alignment, vector and element ranges), and the "launch" calls
// detail::fold_thread, the whole body of fold_kernel, for each thread of the
// grid, one thread after the other. The grid is the one launch_fold would start
// on a GPU with 132 SMs (8 blocks per SM at most), or of one block in every
// third case, so that each thread loops over many vectors. Only the device side
// (the __ldcs load, code generation, the launch itself) is left to the GPU run.
#include "common.cuh"

#include <mdring/cuda/reduce.cuh>

#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace gpu_test;

// A user op (outside an anonymous namespace: a kernel instantiated on a type with
// internal linkage cannot be given hidden visibility, and nvcc says so, warning 1407).
struct xor_op {
  template <class T>
  __host__ __device__ T operator()(T a, T b) const {
    return T(a ^ b);
  }
};

namespace {

bool emulate = false;
std::size_t emulated_max_blocks = 132 * 8;

void need_gpu() {
  if (!emulate) require_gpu();
}

// n elements of device memory (dbuf), or in --emulate of host memory placed the
// same way (one element past a 256-byte boundary when misaligned).
template <class T>
class buf {
public:
  explicit buf(std::size_t n, bool misaligned = false) : n_(n) {
    if (!emulate) {
      d_ = std::make_unique<dbuf<T>>(n, misaligned);
      p_ = d_->get();
    } else {
      h_.resize((n + 2) * sizeof(T) + 512);
      const std::uintptr_t base = (md::cuda::detail::address(h_.data()) + 255) & ~std::uintptr_t(255);
      p_ = reinterpret_cast<T*>(base) + (misaligned ? 1 : 0);
    }
  }
  T* get() const noexcept { return p_; }
  void upload(const std::vector<T>& v) {
    if (d_) d_->upload(v);
    else std::memcpy(p_, v.data(), n_ * sizeof(T));
  }
  std::vector<T> download() const {
    if (d_) return d_->download();
    return std::vector<T>(p_, p_ + n_);
  }
  void poison() {
    if (d_) d_->poison();
    else std::memset(static_cast<void*>(p_), 0xa5, n_ * sizeof(T));
  }

private:
  std::size_t n_;
  std::unique_ptr<dbuf<T>> d_;
  std::vector<unsigned char> h_;
  T* p_ = nullptr;
};

// md::cuda::fold into every dst of dsts and wait for it, or its host emulation
// (see the top).
template <class T, class Op>
void run_fold(std::span<T* const> dsts, std::span<const T* const> in, std::size_t n, const Op& op, bool final,
              std::size_t ranks) {
  if (!emulate) {
    md::cuda::fold(dsts, in, n, op, final, ranks, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return;
  }
  namespace cd = md::cuda::detail;
  cd::fold_with<T, Op>(
      dsts, in, n, final, ranks, [&](T* d, const T* src) { std::memmove(d, src, n * sizeof(T)); },
      [&](std::span<T* const> d, const T* const* chunk, int k, bool fin) {
        std::size_t work = 0;
        const cd::fold_params<T> p = cd::fold_pass(d, chunk, k, n, ranks, fin, work);
        const std::size_t threads = std::size_t(cd::fold_blocks(work, emulated_max_blocks)) * md::cuda::fold_threads;
        for (std::size_t t = 0; t < threads; ++t) {
          if (k == 2) cd::fold_thread<T, Op, 2>(p, op, t, threads);
          else cd::fold_thread<T, Op, 0>(p, op, t, threads);
        }
      });
}
template <class T, class Op>
void run_fold(T* dst, std::span<const T* const> in, std::size_t n, const Op& op, bool final, std::size_t ranks) {
  run_fold(std::span<T* const>(&dst, 1), in, n, op, final, ranks);
}

template <class T, class Op>
void fold_case(opk k, Op op, std::size_t inputs, std::size_t n, int align, bool final, u64 seed) {
  const std::size_t ranks = 7;
  const bool in_place = align == 3;
  std::vector<std::vector<T>> h(inputs, std::vector<T>(n));
  for (std::size_t j = 0; j < inputs; ++j)
    for (std::size_t i = 0; i < n; ++i) h[j][i] = value<T>(seed, j, i, k);
  std::vector<std::unique_ptr<buf<T>>> d;
  for (std::size_t j = 0; j < inputs; ++j) {
    // align 1: everything one element past a boundary; align 2: inputs misaligned
    // one way, dst another (no common phase: element by element).
    const bool mis = align == 1 || (align == 2 && j % 2 == 0);
    d.push_back(std::make_unique<buf<T>>(n, mis));
    d.back()->upload(h[j]);
  }
  buf<T> out(n, align == 1);
  out.poison();
  std::vector<const T*> ptrs;
  for (auto& b : d) ptrs.push_back(b->get());
  run_fold(in_place ? d[0]->get() : out.get(), std::span<const T* const>(ptrs.data(), ptrs.size()), n, op, final,
           ranks);
  const std::vector<T> got = in_place ? d[0]->download() : out.download();

  const std::string where = cat(emulate ? "emulated " : "", "fold<", md::type_name<T>(), "> ", name_of(k), " inputs ",
                                inputs, " n ", n, " align ", align, final ? " final" : "");
  std::vector<const T*> hp;
  for (auto& v : h) hp.push_back(v.data());
  std::vector<T> want(n);
  md::host_reducer<T, Op> red(op, ranks);
  red.combine_n(want.data(), hp.data(), inputs, n, final);
  const bool one_pass = inputs <= std::size_t(md::cuda::max_fold_inputs);
  if (one_pass || !md::is_16bit_float_v<T>) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (!same_bits(got[i], want[i]) && bad++ < 3)
        check(false, where, " element ", i, ": got ", to_double(got[i]), ", host_reducer ", to_double(want[i]));
    check(bad == 0, where, ": ", bad, " elements differ from host_reducer");
  }
  if constexpr (is_float_like<T>) {
    // avg finalized divides by `ranks`, not by the number of inputs: host_reducer
    // checked it above. Not finalized, avg is a sum.
    if (!(final && k == opk::avg))
      check_against_reference<T>(where, k == opk::avg ? opk::sum : k, hp, got.data(), n, one_pass ? 1 : 2,
                                 one_pass ? 0 : std::size_t(md::cuda::max_fold_inputs));
  }
}

template <class T>
void type_suite(u64 seed) {
  // Emulated on the host, the largest count is smaller (CI time), but still
  // large enough that one block of 256 threads loops over its vectors 4 to 16 times.
  // half and bfloat16 keep the GPU's largest count: its two-pass products reach
  // T's subnormal range (the first GPU run found a bound that was too tight there,
  // at element 81017 of 2^18 + 3, which 65537 elements never met).
  const std::size_t big = std::size_t(1) << 18 | 3;
  const std::size_t counts[] = {0, 1, 13, 97, 4099, emulate && !md::is_16bit_float_v<T> ? 65537 : big};
  const std::size_t inputs[] = {1, 2, 3, 8, 64, 67};
  int c = 0;
  for (opk k : {opk::sum, opk::prod, opk::min, opk::max, opk::avg})
    with_op(k, [&](auto op) {
      for (std::size_t in : inputs)
        for (std::size_t n : counts) {
          ++c;
          emulated_max_blocks = c % 3 == 0 ? 1 : 132 * 8;
          fold_case<T>(k, op, in, n, c % 4, k == opk::avg && c % 2 == 0, seed + std::size_t(c));
        }
    });
}

}  // namespace

GPU_TEST("fold: every op on every type, every alignment, 1 to 67 inputs") {
  need_gpu();
  type_suite<std::int8_t>(1);
  type_suite<std::uint8_t>(2);
  type_suite<std::int16_t>(3);
  type_suite<std::uint16_t>(4);
  type_suite<std::int32_t>(5);
  type_suite<std::uint32_t>(6);
  type_suite<std::int64_t>(7);
  type_suite<std::uint64_t>(8);
  type_suite<float>(9);
  type_suite<double>(10);
  type_suite<md::half>(11);
  type_suite<md::bfloat16>(12);
}

GPU_TEST("fold: several outputs get the same bits, in place among them, over 64 inputs too") {
  need_gpu();
  // outs outputs (the IPC transport writes a block into every peer's buffer): each
  // gets exactly what the one-output fold gives; outs > max_fold_outputs copies
  // the rest; in place when the first output is the first input.
  int c = 0;
  for (std::size_t outs : {1u, 2u, 3u, 16u, 19u})
    for (std::size_t inputs : {2u, 4u, 67u})
      for (std::size_t n : {1u, 13u, 4099u}) {
        ++c;
        const bool in_place = c % 3 == 0, misaligned = c % 4 == 1;
        std::vector<std::vector<float>> h(inputs, std::vector<float>(n));
        for (std::size_t j = 0; j < inputs; ++j)
          for (std::size_t i = 0; i < n; ++i) h[j][i] = value<float>(77 + c, j, i, opk::sum);
        std::vector<std::unique_ptr<buf<float>>> d, o;
        std::vector<const float*> ins;
        std::vector<float*> dsts;
        for (std::size_t j = 0; j < inputs; ++j) {
          d.push_back(std::make_unique<buf<float>>(n, misaligned));
          d.back()->upload(h[j]);
          ins.push_back(d.back()->get());
        }
        for (std::size_t q = 0; q < outs; ++q) {
          o.push_back(std::make_unique<buf<float>>(n, misaligned));
          o.back()->poison();
          dsts.push_back(in_place && q == 0 ? d[0]->get() : o.back()->get());
        }
        run_fold(std::span<float* const>(dsts.data(), outs), std::span<const float* const>(ins.data(), inputs), n,
                 md::sum, false, 1);
        std::vector<const float*> hp;
        for (auto& v : h) hp.push_back(v.data());
        std::vector<float> want(n);
        md::host_reducer<float, md::sum_t> red(md::sum, 1);
        red.combine_n(want.data(), hp.data(), inputs, n, false);
        for (std::size_t q = 0; q < outs; ++q) {
          const auto got = in_place && q == 0 ? d[0]->download() : o[q]->download();
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i) bad += !same_bits(got[i], want[i]);
          // float accumulates in float: passes over 64 inputs give host_reducer's bits too
          check(bad == 0, emulate ? "emulated " : "", "fold to ", outs, " outputs, ", inputs, " inputs, n ", n,
                in_place ? " in place" : "", ": output ", q, " has ", bad, " elements off host_reducer");
        }
      }
}

GPU_TEST("fold: dst may not alias an input of a later pass") {
  need_gpu();
  buf<float> a(10);
  std::vector<const float*> in(70, a.get());
  bool thrown = false;
  try {
    run_fold(a.get(), std::span<const float* const>(in.data(), in.size()), 10, md::sum, false, 1);
  } catch (const md::invalid_argument& e) {
    thrown = e.argument() == "in";
  }
  check(thrown, "dst aliasing input 64 of 70 was not refused with invalid_argument(\"in\")");
}

GPU_TEST("fold: a user op (xor) in device code") {
  need_gpu();
  for (int align = 0; align < 4; ++align)
    for (std::size_t in : {2, 5}) fold_case<std::uint32_t>(opk::sum, xor_op{}, in, 4099, align, false, 99);
}

GPU_TEST("fold: half and bfloat16 accumulate in float and round once") {
  need_gpu();
  // 1 + 8 * 2^-11 in half: each partial sum 1 + 2^-11 would round back to 1 in
  // half, the float accumulation keeps all eight and rounds 1 + 2^-8 once.
  const std::size_t k = 9, n = 1000;
  std::vector<std::vector<md::half>> h(k, std::vector<md::half>(n, md::half(0x1.0p-11f)));
  h[0].assign(n, md::half(1.0f));
  std::vector<std::unique_ptr<buf<md::half>>> d;
  std::vector<const md::half*> ptrs;
  for (auto& v : h)
    d.push_back(std::make_unique<buf<md::half>>(n)), d.back()->upload(v), ptrs.push_back(d.back()->get());
  buf<md::half> out(n);
  run_fold(out.get(), std::span<const md::half* const>(ptrs.data(), k), n, md::sum, false, 1);
  const auto got = out.download();
  check(float(got[0]) == 1.0f + 0x1.0p-8f, "half: got ", float(got[0]), ", expected ", 1.0f + 0x1.0p-8f);
  check(float(got[n - 1]) == 1.0f + 0x1.0p-8f, "half: last element");
}

GPU_TEST("fold: more than 2^31 elements (64-bit indexing)") {
  if (emulate) {
    std::printf("  (not emulated: 6 GiB of host memory and minutes; runs on a GPU)\n");
    return;
  }
  need_gpu();
  const std::size_t n = (std::size_t(1) << 31) + 17;
  size_t free_b = 0, total_b = 0;
  cuda_ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (free_b < 3 * n + (std::size_t(1) << 30)) {
    std::printf("  (skipped: needs %zu bytes of free device memory)\n", 3 * n);
    return;
  }
  dbuf<std::uint8_t> a(n), b(n), out(n);
  cuda_ok(cudaMemset(a.get(), 3, n), "cudaMemset");
  cuda_ok(cudaMemset(b.get(), 4, n), "cudaMemset");
  out.poison();
  const std::uint8_t* in[2] = {a.get(), b.get()};
  md::cuda::fold(out.get(), std::span<const std::uint8_t* const>(in, 2), n, md::sum, false, 1, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "sync");
  for (std::size_t i : {std::size_t(0), std::size_t(1) << 31, n - 17, n - 1}) {
    std::uint8_t v = 0;
    cuda_ok(cudaMemcpy(&v, out.get() + i, 1, cudaMemcpyDeviceToHost), "download");
    check(v == 7, "element ", i, " is ", int(v), ", expected 7");
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--emulate") {
    emulate = true;
#ifdef __GLIBC__
    // Every case allocates and frees up to tens of MB of "device" buffers. By default
    // glibc hands them back to the kernel, and each case faults its pages in again:
    // 12 to 15 us a page on CI's VMs: 38 s of CPU for the emulation instead of 9.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    argv[1] = argv[0];
    return gpu_test::run_all(argc - 1, argv + 1);
  }
  return gpu_test::run_all(argc, argv);
}
