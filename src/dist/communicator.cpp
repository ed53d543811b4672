#include "tensorgrad/dist/communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/threads.h"

#ifdef TENSORGRAD_WITH_MPI
#include <mpi.h>
#endif

namespace tensorgrad::dist {

#ifdef TENSORGRAD_WITH_MPI

namespace {
void check_tensor(const Tensor& t, const char* call, bool float_only) {
  if (!t.defined()) throw StateError(std::string(call) + ": the tensor is undefined; pass a tensor holding data");
  if (t.device() != Device::CPU)
    throw StateError(std::string(call) + ": the tensor is on " + device_name(t.device()) +
                     "; collectives on device memory are not built yet: copy it with to(Device::CPU)");
  if (float_only && t.dtype() != DType::Float32)
    throw TypeError(std::string(call) + ": expected a float32 tensor; got " + dtype_name(t.dtype()));
}

// Communicators alive, and whether one of them initialised MPI (and so the
// last one finalises it).
std::mutex g_mutex;
int g_alive = 0;
bool g_we_initialised = false;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw StateError(std::string(what) + " failed: " + std::string(text, size_t(length)));
}

// Adds the wall time of a collective (waiting for slower ranks included).
struct Timed {
  double& seconds;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  explicit Timed(double& s) : seconds(s) {}
  ~Timed() { seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};
}  // namespace

struct Communicator::Impl {
  MPI_Comm world = MPI_COMM_NULL, local = MPI_COMM_NULL;
  std::vector<std::byte> scratch;  // the ring's incoming chunk, kept between calls
};

bool built_with_mpi() { return true; }

Communicator::Communicator() { start(nullptr, nullptr); }
Communicator::Communicator(int* argc, char*** argv) { start(argc, argv); }

void Communicator::start(int* argc, char*** argv) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw StateError("Communicator: MPI was already finalised in this process and cannot start again; keep one "
                     "Communicator alive for the whole program");
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    g_we_initialised = true;
  }
  auto impl = std::make_unique<Impl>();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &impl->world), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(impl->world, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl->world, &rank_);
  MPI_Comm_size(impl->world, &size_);
  check(MPI_Comm_split_type(impl->world, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &impl->local),
        "MPI_Comm_split_type");
  MPI_Comm_rank(impl->local, &local_rank_);
  MPI_Comm_size(impl->local, &local_size_);
  impl_ = impl.release();
  // Ranks sharing a machine share its cores: unless the program chose a
  // thread count, each takes its part (torchrun sets OMP_NUM_THREADS alike).
  if (!num_threads_set() && local_size_ > 1) set_num_threads(std::max(1, num_threads() / local_size_));
  ++g_alive;
}

Communicator::~Communicator() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!impl_) return;
  const std::unique_ptr<Impl> impl(impl_);
  impl_ = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {  // the caller may have finalised MPI already: then its handles are gone
    MPI_Comm_free(&impl->local);
    MPI_Comm_free(&impl->world);
  }
  if (--g_alive == 0 && g_we_initialised && !finalized) {
    MPI_Finalize();
    g_we_initialised = false;
  }
}

void Communicator::check_root(int root, const char* call) const {
  if (root < 0 || root >= size_)
    throw IndexError(std::string(call) + ": root " + std::to_string(root) + " is outside the job's ranks [0, " +
                     std::to_string(size_) + ")");
}

void Communicator::all_reduce(std::span<float> data, ReduceOp op) {
  const Timed timed(seconds_);
  for (size_t at = 0; at < data.size();) {
    const int n = int(std::min<size_t>(data.size() - at, size_t(INT_MAX)));
    ++calls_;
    check(MPI_Allreduce(MPI_IN_PLACE, data.data() + at, n, MPI_FLOAT, MPI_SUM, impl_->world), "MPI_Allreduce");
    at += size_t(n);
  }
  if (op == ReduceOp::Average && size_ > 1) {
    const float inv = 1.0f / float(size_);
    for (float& v : data) v *= inv;
  }
}

void Communicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce", true);
  all_reduce(std::span<float>(tensor.data<float>(), size_t(tensor.numel())), op);
}

void Communicator::reduce(std::span<float> data, int root) {
  check_root(root, "reduce");
  const Timed timed(seconds_);
  for (size_t at = 0; at < data.size();) {
    const int n = int(std::min<size_t>(data.size() - at, size_t(INT_MAX)));
    ++calls_;
    float* p = data.data() + at;
    check(MPI_Reduce(rank_ == root ? MPI_IN_PLACE : p, p, n, MPI_FLOAT, MPI_SUM, root, impl_->world), "MPI_Reduce");
    at += size_t(n);
  }
}

namespace {
template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
}  // namespace

// A ring all-reduce (Patarasuk & Yuan 2009; Horovod's and NCCL's) on MPI's
// point-to-point messages: R - 1 steps of reduce-scatter, after which rank
// r holds chunk (r + 1) mod R summed over every rank in one fixed order,
// then R - 1 steps passing the finished chunks on. Each chunk is summed by
// one rank and copied to the others, so every rank gets the same bits, and
// each rank sends 2 (R - 1) / R of the data whatever R is.
template <typename T>
void Communicator::ring_sum(T* p, int n) {
  const int R = size_, r = rank_, right = (r + 1) % R, left = (r + R - 1) % R;
  auto begin = [&](int c) { return int(int64_t(n) * ((c % R + R) % R) / R); };
  auto count = [&](int c) {
    const int k = (c % R + R) % R;
    return int(int64_t(n) * (k + 1) / R - int64_t(n) * k / R);
  };
  impl_->scratch.resize(size_t(count(0) + 1) * sizeof(T));  // chunks differ by at most one element
  T* incoming = reinterpret_cast<T*>(impl_->scratch.data());
  for (int s = 0; s < R - 1; ++s) {
    const int send = r - s, recv = r - s - 1;
    check(MPI_Sendrecv(p + begin(send), count(send), mpi_type<T>(), right, 0, incoming, count(recv), mpi_type<T>(),
                       left, 0, impl_->world, MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
    T* mine = p + begin(recv);
    for (int i = 0, m = count(recv); i < m; ++i) mine[i] += incoming[i];
  }
  for (int s = 0; s < R - 1; ++s) {
    const int send = r + 1 - s, recv = r - s;
    check(MPI_Sendrecv(p + begin(send), count(send), mpi_type<T>(), right, 1, p + begin(recv), count(recv),
                       mpi_type<T>(), left, 1, impl_->world, MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
  }
}

template <typename T>
void Communicator::sum_onto_root_and_back(std::span<T> data) {
  if (size_ == 1) return;
  const Timed timed(seconds_);
  for (size_t at = 0; at < data.size();) {
    const int n = int(std::min<size_t>(data.size() - at, size_t(INT_MAX)));
    ++calls_;
    T* p = data.data() + at;
    if (n >= 64 * size_) {
      ring_sum(p, n);  // large: bandwidth-optimal
    } else {
      // small (logs, votes): two messages of latency, not 2 (R - 1)
      check(MPI_Reduce(rank_ == 0 ? MPI_IN_PLACE : p, p, n, mpi_type<T>(), MPI_SUM, 0, impl_->world), "MPI_Reduce");
      check(MPI_Bcast(p, n, mpi_type<T>(), 0, impl_->world), "MPI_Bcast");
    }
    at += size_t(n);
  }
}

void Communicator::reduce_broadcast(std::span<float> data) { sum_onto_root_and_back(data); }
void Communicator::reduce_broadcast(std::span<double> data) { sum_onto_root_and_back(data); }

void Communicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
  check_root(root, "broadcast");
  const Timed timed(seconds_);
  for (size_t at = 0; at < bytes.size();) {
    const int n = int(std::min<size_t>(bytes.size() - at, size_t(INT_MAX)));
    ++calls_;
    check(MPI_Bcast(bytes.data() + at, n, MPI_BYTE, root, impl_->world), "MPI_Bcast");
    at += size_t(n);
  }
}

void Communicator::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast", false);
  broadcast_bytes(std::span<std::byte>(static_cast<std::byte*>(tensor.raw()), tensor.nbytes()), root);
}

void Communicator::barrier() {
  const Timed timed(seconds_);
  ++calls_;
  check(MPI_Barrier(impl_->world), "MPI_Barrier");
}

void Communicator::abort(int code) const {
  MPI_Abort(impl_ ? impl_->world : MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

// What makes tensorgrad::mpi's archive member be linked: the target asks the
// linker for this symbol (-Wl,--undefined), and the member's strong
// definitions then replace the weak ones of the library built without MPI.
extern "C" {
extern const int tensorgrad_mpi_communicator;
const int tensorgrad_mpi_communicator = 1;
}

#else  // the library itself: weak definitions, replaced by tensorgrad::mpi's

// Weak, so that a program linking tensorgrad::mpi gets the MPI definitions
// instead, whatever the order of the archives; a program that did not ask for
// MPI links no MPI at all. No Impl here: nothing in this branch makes one.
#define TENSORGRAD_WITHOUT_MPI [[gnu::weak]]

TENSORGRAD_WITHOUT_MPI bool built_with_mpi() { return false; }

namespace {
[[noreturn]] void no_mpi() {
  throw StateError("Communicator: this program was linked without tensorgrad's MPI communicator: link the target "
                   "tensorgrad::mpi (find_package(tensorgrad COMPONENTS mpi), or pkg-config tensorgrad-mpi) in "
                   "place of tensorgrad::tensorgrad, with tensorgrad built where MPI was found (libopenmpi-dev and "
                   "openmpi-bin: scripts/setup.sh --test; TENSORGRAD_MPI=AUTO or ON)");
}
}  // namespace

TENSORGRAD_WITHOUT_MPI Communicator::Communicator() { no_mpi(); }
TENSORGRAD_WITHOUT_MPI Communicator::Communicator(int*, char***) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI Communicator::~Communicator() {}
TENSORGRAD_WITHOUT_MPI void Communicator::start(int*, char***) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::check_root(int, const char*) const { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::all_reduce(std::span<float>, ReduceOp) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::all_reduce(Tensor&, ReduceOp) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::reduce(std::span<float>, int) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::reduce_broadcast(std::span<float>) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::reduce_broadcast(std::span<double>) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::broadcast_bytes(std::span<std::byte>, int) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::broadcast(Tensor&, int) { no_mpi(); }
TENSORGRAD_WITHOUT_MPI void Communicator::barrier() { no_mpi(); }
// Unreachable: no communicator exists without MPI.
TENSORGRAD_WITHOUT_MPI void Communicator::abort(int code) const { std::exit(code); }

#endif

}  // namespace tensorgrad::dist
