// wds-train: data-parallel image classification over WebDataset shards, the
// reference example of the library under LibTorch DDP.
//
//   torchrun --nproc_per_node 2 --no_python wds-train
//       --train 'data/train-{000000..000005}.tar' --test data/test-000000.tar
//       --epochs 5 --batch-size 64 --image-size 28 --channels 1 --num-classes 10
//
// Every rank streams its own shards (split per epoch by the library), decodes
// and batches them on loader threads, and trains a small CNN whose gradients
// are averaged over the ranks. The epoch length is agreed before each epoch
// (--equalize), so no rank ever waits in a collective for one that has run out
// of data. Rank 0 logs each epoch on stderr; every rank ends with one JSON line
// on stdout.
#include <dirent.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/atomic_file.h"
#include "wds/internal/io/directories.h"
#include "wds/loader/elastic.h"
#include "wds/loader/equalize.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_index.h"
#include "wds/torch/distributed.h"
#include "wds/torch/equalize.h"
#include "wds/torch/prefetcher.h"
#include "wds/torch/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] = R"(usage: wds-train --train PATTERN [options]
Trains a small CNN on image + class shards with data-parallel ranks (torchrun,
SLURM srun, or one plain process).
  --train PATTERN        training shards (brace patterns, "::" lists)
  --test PATTERN         test shards, evaluated after every epoch
  --epochs N             (default 5)
  --batch-size B         per rank (default 64)
  --lr X                 (default 0.001)
  --weight-decay X       (default 0)
  --optimizer sgd|adam   (default adam; sgd uses momentum 0.9)
  --image-size S         images are decoded and resized to SxS (default 28)
  --channels 1|3         (default 1)
  --image-field SPEC     (default 'png;jpg')
  --label-field F        (default cls)
  --num-classes K        (default 10)
  --workers N            loader threads per rank (default 1)
  --shuffle N            sample shuffle buffer per worker (default 1000; < 2: off)
  --no-shardshuffle      read the shards in list order every epoch
  --seed N               (default 0)
  --checkpoint-dir DIR   rank 0 saves DIR/checkpoint-NNNNNN.pt after each epoch
                         (atomically); a restart resumes from the latest
  --checkpoint-every N   also checkpoint every N steps inside an epoch: the model,
                         optimizer and, per rank, the loader's position, random
                         state and epoch counters, and the job state of all
                         ranks; a restart continues mid-epoch with exactly the
                         batches it would have trained on, or, with another
                         world size or --workers, trains what the epoch had
                         left (each sample once, equal steps on every rank)
  --index FILE|URL       the shard set's JSON index (wds-shard index --json FILE,
                         or create --index): every shard's sample count from one
                         file or remote URL (not cached), read once (its URLs as
                         --train expands them)
  --split samples|shards
                         samples (default): every rank reads an equal run of the
                         epoch's samples, slices starting and ending inside
                         shards; shards: whole shards per rank and worker (counts
                         from SHARD.idx sidecars, else one header scan per shard)
  --equalize drop|wrap|off
                         drop (default): every rank runs the smallest rank's
                         full batches; wrap: every sample trains each epoch, short
                         ranks repeat from their next pass; off: no equalization
  --join                 per-step "I still have data" all-reduce: the epoch ends
                         on every rank when one runs out (unknown-length data)
  --threads N            LibTorch intra-op threads per rank (default 1; 0: LibTorch's)
  --device D             cpu, cuda, cuda:N (default: cuda:LOCAL_RANK if any, else cpu)
  --decode-device cpu|cuda
                         where training images are decoded (default cpu): cuda
                         decodes each batch on the training GPU (nvJPEG), as
                         normalized float NCHW; needs --channels 3 and a CUDA device
  --decode-in-workers    with --decode-device cuda: each loader worker decodes its
                         batches on the GPU, the training thread only launches
                         each batch's resize kernel (LoaderOptions::gpu_decoders)
  --shared-gpu           all ranks of a node train on one GPU (--device or cuda:0)
                         with the Gloo backend
  --timeout-s N          rendezvous/collective timeout in seconds (default 1800)
  --log-every N          rank 0 prints progress every N steps (default 0: never)
  --log-keys PREFIX      each rank appends "epoch<TAB>key" per training sample to
                         PREFIX.rank<R>
)";

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "wds-train: " << message << "\n";
  std::exit(2);
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// PinDevice is the GPU whose page-locked memory the loader's batches use: the
// training device, not LOCAL_RANK's, which differs under --shared-gpu.
std::optional<int> PinDevice(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  return device.has_index() ? device.index() : 0;
}

struct Options {
  std::string train;
  std::string test;
  int epochs = 5;
  int64_t batch_size = 64;
  double lr = 1e-3;
  double weight_decay = 0.0;
  std::string optimizer = "adam";
  int image_size = 28;
  int channels = 1;
  std::string image_field = "png;jpg";
  std::string label_field = "cls";
  int num_classes = 10;
  int workers = 1;
  int64_t shuffle = 1000;
  bool shardshuffle = true;
  uint64_t seed = 0;
  std::string checkpoint_dir;
  std::string index;
  int64_t checkpoint_every = 0;
  // crash_after_steps (fault injection for tests): SIGKILL this rank after
  // that many training steps of the run.
  int64_t crash_after_steps = 0;
  wds::EqualizePolicy equalize = wds::EqualizePolicy::kDrop;
  wds::SplitGranularity split = wds::SplitGranularity::kSamples;
  bool join = false;
  int threads = 1;
  std::string device;
  bool decode_on_gpu = false;
  bool decode_in_workers = false;  // with decode_on_gpu: GpuWorkerDecoders
  bool shared_gpu = false;
  int64_t timeout_s = 1800;
  int64_t log_every = 0;
  std::string log_keys;
};

int64_t ParseInt(std::string_view flag, const std::string& text, int64_t min) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < min) {
    Die(std::string(flag) + " needs an integer >= " + std::to_string(min) + ", got \"" + text +
        "\"");
  }
  return value;
}

double ParseDouble(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || value < 0) {
    Die(std::string(flag) + " needs a number >= 0, got \"" + text + "\"");
  }
  return value;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (flag == "--no-shardshuffle") {
      o.shardshuffle = false;
      continue;
    }
    if (flag == "--join") {
      o.join = true;
      continue;
    }
    if (flag == "--shared-gpu") {
      o.shared_gpu = true;
      continue;
    }
    if (flag == "--decode-in-workers") {
      o.decode_in_workers = true;
      continue;
    }
    if (i + 1 == argc) Die(std::string(flag) + " needs a value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--train")
      o.train = value;
    else if (flag == "--test")
      o.test = value;
    else if (flag == "--epochs")
      o.epochs = ParseInt(flag, value, 0);
    else if (flag == "--batch-size")
      o.batch_size = ParseInt(flag, value, 1);
    else if (flag == "--lr")
      o.lr = ParseDouble(flag, value);
    else if (flag == "--weight-decay")
      o.weight_decay = ParseDouble(flag, value);
    else if (flag == "--optimizer")
      o.optimizer = value;
    else if (flag == "--image-size")
      o.image_size = ParseInt(flag, value, 4);
    else if (flag == "--channels")
      o.channels = ParseInt(flag, value, 1);
    else if (flag == "--image-field")
      o.image_field = value;
    else if (flag == "--label-field")
      o.label_field = value;
    else if (flag == "--num-classes")
      o.num_classes = ParseInt(flag, value, 2);
    else if (flag == "--workers")
      o.workers = ParseInt(flag, value, 1);
    else if (flag == "--shuffle")
      o.shuffle = ParseInt(flag, value, 0);
    else if (flag == "--seed")
      o.seed = ParseInt(flag, value, 0);
    else if (flag == "--checkpoint-dir")
      o.checkpoint_dir = value;
    else if (flag == "--index")
      o.index = value;
    else if (flag == "--checkpoint-every")
      o.checkpoint_every = ParseInt(flag, value, 1);
    else if (flag == "--crash-after-steps")
      o.crash_after_steps = ParseInt(flag, value, 1);
    else if (flag == "--threads")
      o.threads = ParseInt(flag, value, 0);
    else if (flag == "--decode-device") {
      if (value != "cpu" && value != "cuda") {
        Die("--decode-device must be cpu or cuda, not \"" + std::string(value) + "\"");
      }
      o.decode_on_gpu = value == "cuda";
    } else if (flag == "--device")
      o.device = value;
    else if (flag == "--timeout-s")
      o.timeout_s = ParseInt(flag, value, 1);
    else if (flag == "--log-every")
      o.log_every = ParseInt(flag, value, 0);
    else if (flag == "--log-keys")
      o.log_keys = value;
    else if (flag == "--split") {
      if (value != "samples" && value != "shards") {
        Die("--split wants samples or shards, not \"" + std::string(value) + "\"");
      }
      o.split =
          value == "samples" ? wds::SplitGranularity::kSamples : wds::SplitGranularity::kShards;
    } else if (flag == "--equalize") {
      absl::StatusOr<wds::EqualizePolicy> policy = wds::ParseEqualizePolicy(value);
      if (!policy.ok()) Die(Message(policy.status()));
      if (*policy == wds::EqualizePolicy::kPad) {
        Die("--equalize pad is for evaluation (padding steps train on nothing): training takes "
            "drop, wrap or off");
      }
      o.equalize = *policy;
    } else {
      Die("unknown option " + std::string(flag) + " (see --help)");
    }
  }
  if (o.train.empty()) Die("--train PATTERN is required (see --help)");
  if (o.optimizer != "sgd" && o.optimizer != "adam") Die("--optimizer must be sgd or adam");
  if (o.channels != 1 && o.channels != 3) Die("--channels must be 1 or 3");
  if (o.decode_on_gpu && o.channels != 3) {
    Die("--decode-device cuda needs --channels 3 (the GPU path makes RGB)");
  }
  if (o.decode_in_workers && !o.decode_on_gpu) {
    Die("--decode-in-workers needs --decode-device cuda (the CPU path always decodes in the "
        "workers)");
  }
  return o;
}

// Net is two convolution blocks (3x3, ReLU, 2x2 max-pool) and two dense layers:
// the published two-conv-layer Fashion-MNIST baselines reach 0.88-0.92.
struct NetImpl : torch::nn::Module {
  NetImpl(int channels, int image_size, int classes)
      : conv1(torch::nn::Conv2dOptions(channels, 32, 3).padding(1)),
        conv2(torch::nn::Conv2dOptions(32, 64, 3).padding(1)),
        fc1(64 * (image_size / 4) * (image_size / 4), 128),
        fc2(128, classes) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(torch::dropout(x, 0.25, is_training()));
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

// ImageBatch turns a collated image field (uint8 [B, H, W] from a gray spec,
// [B, H, W, C] from a colour one) into normalized float NCHW on `device`.
// Images decoded on the GPU (--decode-device cuda) are that already.
torch::Tensor ImageBatch(const torch::Tensor& images, const torch::Device& device) {
  if (images.is_cuda() && images.is_floating_point()) return images;
  torch::Tensor x = images.dim() == 3 ? images.unsqueeze(1) : images.permute({0, 3, 1, 2});
  x = x.to(device, /*non_blocking=*/true).to(torch::kFloat32);
  if (images.scalar_type() == torch::kUInt8) x = x.div(255.0);
  return x.sub(0.5).div(0.5);
}

// FileNames lists a directory's entries (none if it cannot be read). POSIX,
// not std::filesystem: see wds/internal/io/directories.h.
std::vector<std::string> FileNames(const std::string& directory) {
  std::vector<std::string> names;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) names.emplace_back(entry->d_name);
  closedir(dir);
  return names;
}

wds::Pipeline Expect(absl::StatusOr<wds::Pipeline> pipeline, std::string_view what) {
  if (!pipeline.ok()) Die(std::string(what) + ": " + Message(pipeline.status()));
  return *std::move(pipeline);
}

std::vector<std::string> TupleFields(const Options& o, bool with_keys) {
  std::vector<std::string> fields{o.image_field, o.label_field};
  if (with_keys) fields.emplace_back(wds::kKeyField);
  return fields;
}

wds::ImageDecodeOptions DecodeOptions(const Options& o) {
  wds::ImageDecodeOptions image;
  image.resize = {.mode = wds::ResizeMode::kStretch, .width = o.image_size, .height = o.image_size};
  return image;
}

const char* ImageSpec(const Options& o) { return o.channels == 1 ? "l8" : "rgb8"; }

// LoadIndex reads --index (null without one), a remote one with the
// environment's remote options, uncached (an index may be replaced).
std::shared_ptr<const wds::DatasetIndex> LoadIndex(const Options& o) {
  if (o.index.empty()) return nullptr;
  absl::StatusOr<wds::DatasetIndex> index = wds::DatasetIndex::Load(std::string_view(o.index), {});
  if (!index.ok()) Die("--index: " + Message(index.status()));
  return std::make_shared<const wds::DatasetIndex>(*std::move(index));
}

// TrainPipeline is the recipe of every training epoch, before WithLength.
wds::Pipeline TrainPipeline(const Options& o, const std::vector<std::string>& shards,
                            std::shared_ptr<const wds::DatasetIndex> index) {
  wds::WebDatasetOptions source{.seed = o.seed, .shardshuffle = o.shardshuffle};
  source.split = o.split;
  source.dataset_index = std::move(index);
  wds::Pipeline read =
      Expect(wds::WebDataset(shards, source), "--train").Shuffle(static_cast<size_t>(o.shuffle));
  // On the GPU: ImageBatch's (x / 255 - 0.5) / 0.5, in the decode kernel.
  const wds::GpuDecodeOptions gpu{.normalize = wds::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}};
  return (o.decode_on_gpu ? read.DecodeOnGpu("torchrgb", DecodeOptions(o), gpu)
                          : read.Decode(ImageSpec(o), DecodeOptions(o)))
      .ToTuple(TupleFields(o, !o.log_keys.empty()))
      .Batched(static_cast<size_t>(o.batch_size),
               {.partial = o.equalize != wds::EqualizePolicy::kDrop});
}

// TestPipeline gives each rank every world-th sample of each worker's stream:
// the ranks read the same shards (no node split, so one test shard serves any
// number of ranks) and decode only their own share.
wds::Pipeline TestPipeline(const Options& o, int rank, int world) {
  wds::WebDatasetOptions source{.nodesplitter = nullptr, .allow_empty = true};
  return Expect(wds::WebDataset(o.test, source), "--test")
      .Slice(rank, std::nullopt, world)
      .Decode(ImageSpec(o), DecodeOptions(o))
      .ToTuple(TupleFields(o, false))
      .Batched(256);
}

struct EpochStats {
  int64_t batches = 0;
  int64_t samples = 0;
  double loss_sum = 0;
  int64_t correct = 0;
  double wait_s = 0;
  double loop_s = 0;
};

// CheckpointAt is where a checkpoint stands: in `epoch` after `step` steps
// (step 0: at its start, after `epoch` completed epochs).
struct CheckpointAt {
  int epoch = 0;
  int64_t step = 0;
};

// Trainer holds the model, optimizer and gradient synchronisation of one rank.
class Trainer {
 public:
  Trainer(const Options& o, const wds::DistributedContext& dist)
      : o_(o), dist_(dist), net_(o.channels, o.image_size, o.num_classes) {}

  // Setup loads the latest checkpoint (onto the CPU, then the device), makes
  // the optimizer and broadcasts rank 0's weights; returns where it stood.
  CheckpointAt Setup() {
    const CheckpointAt at = AgreeOnCheckpoint();
    const bool resume = at.epoch > 0 || at.step > 0;
    if (resume) {
      torch::serialize::InputArchive archive;
      archive.load_from(CheckpointPath(at), torch::kCPU);
      torch::serialize::InputArchive model;
      archive.read("model", model);
      net_->load(model);
    }
    net_->to(dist_.device());
    MakeOptimizer();
    if (resume) {
      torch::serialize::InputArchive archive;
      archive.load_from(CheckpointPath(at), dist_.device());
      torch::serialize::InputArchive state;
      archive.read("optimizer", state);
      optimizer_->load(state);
    }
    grads_ = std::make_unique<wds::GradientSync>(dist_, *net_);
    return at;
  }

  // ParamsHash fingerprints the parameters' bytes (FNV-1a), to compare runs.
  std::string ParamsHash() const {
    uint64_t h = wds::kFnv1aOffset;
    for (const torch::Tensor& p : net_->parameters()) {
      const torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
      h = wds::Fnv1a({static_cast<const char*>(c.data_ptr()), c.nbytes()}, h);
    }
    char text[17];
    std::snprintf(text, sizeof(text), "%016" PRIx64, h);
    return text;
  }

  // Step trains on one batch; returns the summed loss and the correct count.
  std::pair<double, int64_t> Step(const torch::Tensor& images, const torch::Tensor& labels) {
    net_->train();
    optimizer_->zero_grad();
    torch::Tensor logits = net_->forward(ImageBatch(images, dist_.device()));
    torch::Tensor target = labels.to(dist_.device(), /*non_blocking=*/true);
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, target);
    loss.backward();
    grads_->Synchronize();
    optimizer_->step();
    const int64_t correct = logits.argmax(1).eq(target).sum().item<int64_t>();
    return {loss.item<double>() * static_cast<double>(labels.size(0)), correct};
  }

  // Evaluate returns the test accuracy over all ranks.
  double Evaluate() {
    torch::NoGradGuard no_grad;
    net_->eval();
    wds::Loader loader(
        TestPipeline(o_, dist_.rank(), dist_.world_size()),
        {.workers = o_.workers, .rank = dist_.rank(), .world_size = dist_.world_size()});
    int64_t correct = 0;
    int64_t seen = 0;
    for (const wds::Sample& batch : loader) {
      const wds::TensorBatch t = wds::ToTensorBatch(batch);
      torch::Tensor target = t[1].to(dist_.device());
      correct += net_->forward(ImageBatch(t[0], dist_.device()))
                     .argmax(1)
                     .eq(target)
                     .sum()
                     .item<int64_t>();
      seen += t[1].size(0);
    }
    std::vector<int64_t> totals =
        dist_.AllReduce(std::vector<int64_t>{correct, seen}, wds::ReduceOp::kSum);
    return totals[1] == 0 ? 0.0 : static_cast<double>(totals[0]) / static_cast<double>(totals[1]);
  }

  // SaveCheckpoint (rank 0) writes the model and optimizer at `at` through a
  // temporary file renamed into place, so a crash never leaves a truncated
  // checkpoint under the final name. Mid-epoch, every rank has written its
  // RankStatePath(at) before (see Run::SaveMidEpoch).
  void SaveCheckpoint(CheckpointAt at) {
    if (o_.checkpoint_dir.empty() || !dist_.is_main()) return;
    if (absl::Status made = wds::MakeDirectories(o_.checkpoint_dir); !made.ok()) {
      Die("--checkpoint-dir: " + Message(made));
    }
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model;
    net_->save(model);
    archive.write("model", model);
    torch::serialize::OutputArchive state;
    optimizer_->save(state);
    archive.write("optimizer", state);
    const std::string path = CheckpointPath(at);
    const std::string temporary = wds::TemporaryPath(path);
    archive.save_to(temporary);
    if (rename(temporary.c_str(), path.c_str()) != 0) {
      Die("cannot rename " + temporary + " to " + path + ": " + std::strerror(errno));
    }
  }

  // RankStatePath is where a rank keeps its part of a mid-epoch checkpoint.
  std::string RankStatePath(CheckpointAt at) const { return RankStatePath(at, dist_.rank()); }
  std::string RankStatePath(CheckpointAt at, int rank) const {
    char name[64];
    std::snprintf(name, sizeof(name), "rank-state-%06d-%06" PRId64 ".rank%d", at.epoch, at.step,
                  rank);
    return o_.checkpoint_dir + "/" + name;
  }

 private:
  std::string CheckpointPath(CheckpointAt at) const {
    char name[64];
    if (at.step == 0) {
      std::snprintf(name, sizeof(name), "checkpoint-%06d.pt", at.epoch);
    } else {
      std::snprintf(name, sizeof(name), "checkpoint-%06d-%06" PRId64 ".pt", at.epoch, at.step);
    }
    return o_.checkpoint_dir + "/" + name;
  }

  // AgreeOnCheckpoint: rank 0 finds the latest checkpoint and every rank
  // resumes from it (the others must see the same directory).
  CheckpointAt AgreeOnCheckpoint() const {
    constexpr int64_t kStepBits = 32;
    int64_t latest = 0;  // epoch << kStepBits | step
    if (dist_.is_main() && !o_.checkpoint_dir.empty()) {
      static const std::regex kName("checkpoint-([0-9]{6})(-([0-9]{6}))?\\.pt");
      for (const std::string& name : FileNames(o_.checkpoint_dir)) {
        std::smatch match;
        if (!std::regex_match(name, match, kName)) continue;
        const int64_t step = match[3].matched ? std::stoll(match[3]) : 0;
        latest = std::max<int64_t>(latest, std::stoll(match[1]) << kStepBits | step);
      }
    }
    latest = dist_.AllReduce(latest, wds::ReduceOp::kMax);
    const CheckpointAt at{static_cast<int>(latest >> kStepBits),
                          latest & ((int64_t{1} << kStepBits) - 1)};
    if (latest > 0 && access(CheckpointPath(at).c_str(), F_OK) != 0) {
      Die("rank " + std::to_string(dist_.rank()) + " cannot read " + CheckpointPath(at) +
          ", which rank 0 resumes from: --checkpoint-dir must be shared by all ranks");
    }
    return at;
  }

  void MakeOptimizer() {
    if (o_.optimizer == "sgd") {
      optimizer_ = std::make_unique<torch::optim::SGD>(
          net_->parameters(),
          torch::optim::SGDOptions(o_.lr).momentum(0.9).weight_decay(o_.weight_decay));
    } else {
      optimizer_ = std::make_unique<torch::optim::Adam>(
          net_->parameters(), torch::optim::AdamOptions(o_.lr).weight_decay(o_.weight_decay));
    }
  }

  const Options& o_;
  const wds::DistributedContext& dist_;
  Net net_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<wds::GradientSync> grads_;
};

// A rank state holds, a line each: this header, the epoch's counters, the CPU
// generator's state, the training device's generator state (empty on CPU)
// and the loader's state. (v1 lacked the device's line.)
constexpr const char* kRankStateHeader = "wds-train rank state v2";

// GeneratorHex is the state of `device`'s default random generator, in hex.
std::string GeneratorHex(torch::Device device) {
  const torch::Tensor state = torch::globalContext().defaultGenerator(device).get_state();
  std::string hex(2 * state.numel(), '0');
  const auto* bytes = state.data_ptr<uint8_t>();
  for (int64_t i = 0; i < state.numel(); ++i) {
    std::snprintf(&hex[2 * i], 3, "%02x", bytes[i]);
  }
  return hex;
}

// RestoreGenerator sets `device`'s default generator to a GeneratorHex state
// read from `path`.
void RestoreGenerator(torch::Device device, const std::string& hex, const std::string& path) {
  if (hex.size() % 2 != 0 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    Die("checkpoint: " + path + ": the generator state of " + device.str() + " is not hex");
  }
  torch::Tensor state = torch::empty({static_cast<int64_t>(hex.size() / 2)}, torch::kUInt8);
  for (int64_t i = 0; i < state.numel(); ++i) {
    state.data_ptr<uint8_t>()[i] =
        static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  at::Generator generator = torch::globalContext().defaultGenerator(device);  // shares its state
  generator.set_state(state);
}

std::vector<std::string> ExpandOrDie(const std::string& pattern) {
  absl::StatusOr<std::vector<std::string>> shards = wds::ExpandUrls(pattern);
  if (!shards.ok()) Die("--train: " + Message(shards.status()));
  return *std::move(shards);
}

// WriteAtomically writes `text` to `path` through a temporary file renamed
// into place, so that a crash never leaves a truncated file under the name.
void WriteAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = wds::TemporaryPath(path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) Die("checkpoint: cannot write " + temporary);
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    Die("checkpoint: cannot rename " + temporary + " to " + path + ": " + std::strerror(errno));
  }
}

// RankState is one rank's part of a mid-epoch checkpoint (kRankStateHeader).
struct RankState {
  EpochStats stats;
  std::string cpu_rng;
  std::string device_rng;
  std::string loader_state;
};

RankState ReadRankState(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string header, counters;
  RankState state;
  const bool read = std::getline(in, header) && header == kRankStateHeader &&
                    std::getline(in, counters) && std::getline(in, state.cpu_rng) &&
                    std::getline(in, state.device_rng) && std::getline(in, state.loader_state);
  if (!read) {
    Die("checkpoint: cannot read " + path + " (missing, or not a " + kRankStateHeader +
        (header.rfind("wds-train rank state ", 0) == 0 ? ": it is a " + header + ")" : ")"));
  }
  std::istringstream numbers(counters);
  std::string loss;
  numbers >> state.stats.batches >> state.stats.samples >> state.stats.correct >> loss;
  state.stats.loss_sum = std::strtod(loss.c_str(), nullptr);
  return state;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// KeysOf returns the batch's "__key__" texts (present with --log-keys).
const wds::TextList* KeysOf(const wds::Sample& batch) {
  const wds::Value* keys = batch.Find(wds::kKeyField);
  return keys == nullptr ? nullptr : std::get_if<wds::TextList>(keys);
}

class Run {
 public:
  Run(const Options& o, const wds::DistributedContext& dist)
      : o_(o),
        dist_(dist),
        trainer_(o, dist),
        shards_(ExpandOrDie(o.train)),
        index_(LoadIndex(o)),
        recipe_(TrainPipeline(o, shards_, index_)) {
    if (o.decode_on_gpu && !dist.device().is_cuda()) {
      Die("--decode-device cuda needs a CUDA training device, not " + dist.device().str());
    }
    if (o.decode_in_workers) {
      // Made once, one decoder per worker, and given to every epoch's Loader.
      absl::StatusOr<std::shared_ptr<wds::GpuWorkerDecoders>> decoders =
          wds::GpuWorkerDecoders::Create(dist.device().index(), {}, o.workers);
      if (!decoders.ok()) Die(Message(decoders.status()));
      gpu_workers_ = *std::move(decoders);
    }
    if (index_ != nullptr) {
      for (const wds::DatasetShard& shard : index_->shards) counts_.Set(shard.url, shard.nsamples);
    }
    if (!o.log_keys.empty()) {
      keys_.open(o.log_keys + ".rank" + std::to_string(dist.rank()), std::ios::app);
      if (!keys_) Die("cannot open " + o.log_keys + ".rank" + std::to_string(dist.rank()));
    }
  }

  void Main() {
    const CheckpointAt start = trainer_.Setup();
    if (dist_.is_main()) {
      std::cerr << "wds-train: " << dist_.world_size() << " rank(s), backend " << dist_.backend()
                << ", device " << dist_.device() << ", " << shards_.size()
                << " training shards, split "
                << (o_.split == wds::SplitGranularity::kSamples ? "samples" : "shards")
                << ", equalize " << wds::EqualizePolicyName(o_.equalize)
                << (o_.join ? " + join" : "")
                << (start.step > 0 ? ", resuming in epoch " + std::to_string(start.epoch) +
                                         " after step " + std::to_string(start.step)
                    : start.epoch > 0 ? ", resuming after epoch " + std::to_string(start.epoch)
                                      : "")
                << "\n";
    }
    for (int epoch = start.epoch; epoch < o_.epochs; ++epoch) {
      RunEpoch(epoch, epoch == start.epoch ? start.step : 0);
    }
    PrintSummary();
  }

 private:
  // EpochLoader plans the epoch, agrees on its length and opens its loader.
  // With `job` (an elastic resume) it plans what the job left over of the
  // epoch instead of the whole epoch.
  std::unique_ptr<wds::Loader> EpochLoader(int epoch, const std::string* job = nullptr) {
    wds::Pipeline recipe = recipe_;
    if (o_.equalize != wds::EqualizePolicy::kOff) {
      wds::WorkerContext ctx{.rank = dist_.rank(),
                             .world_size = dist_.world_size(),
                             .num_workers = o_.workers,
                             .epoch = epoch,
                             .seed = o_.seed};
      const wds::EpochBatching batching{.batch_size = o_.batch_size,
                                        .partial = o_.equalize != wds::EqualizePolicy::kDrop};
      absl::StatusOr<wds::RankEpochPlan> plan =
          job != nullptr ? wds::PlanResumedEpoch(recipe_, *job, ctx, batching)
                         : wds::PlanRankEpoch(shards_, {.shuffle = o_.shardshuffle, .split = o_.split},
                                              ctx, batching, counts_);
      if (!plan.ok()) Die(Message(plan.status()));
      absl::StatusOr<wds::EqualizedSteps> steps = wds::AgreeOnSteps(dist_, *plan, o_.equalize);
      if (!steps.ok()) Die(Message(steps.status()));
      LogPlan(epoch, *plan, *steps);
      recipe = recipe.WithLength(steps->steps);
    }
    auto loader = std::make_unique<wds::Loader>(
        recipe, wds::LoaderOptions{.workers = o_.workers,
                                   .prefetch = 4,
                                   .rank = dist_.rank(),
                                   .world_size = dist_.world_size(),
                                   .pin_memory = dist_.device().is_cuda(),
                                   .device = PinDevice(dist_.device()),
                                   .gpu_decoders = gpu_workers_});
    loader->SetEpoch(epoch);
    return loader;
  }

  // LogPlan has rank 0 report what an equalized epoch will train: the samples
  // of all ranks, each rank's share, the agreed steps and, under kDrop, how
  // many samples they reach and how many are left out. Every rank must call
  // it (it gathers the ranks' counts). REQUIRES: o_.equalize is not kOff.
  void LogPlan(int epoch, const wds::RankEpochPlan& plan, const wds::EqualizedSteps& steps) const {
    const std::vector<int64_t> held = dist_.AllGather(plan.samples());
    const int64_t trained =
        o_.equalize == wds::EqualizePolicy::kDrop
            ? dist_.AllReduce(plan.SamplesInFirst(steps.steps), wds::ReduceOp::kSum)
            : 0;
    if (!dist_.is_main()) return;
    const int64_t total = std::accumulate(held.begin(), held.end(), int64_t{0});
    const auto [fewest, most] = std::minmax_element(held.begin(), held.end());
    std::cerr << "epoch " << epoch << ": " << total << " samples over " << held.size()
              << " rank(s), " << *fewest << (*most != *fewest ? " to " + std::to_string(*most) : "")
              << " each; equalize " << wds::EqualizePolicyName(o_.equalize) << ": batches per rank";
    for (int64_t p : steps.proposals) std::cerr << " " << p;
    std::cerr << " -> " << steps.steps << " steps";
    if (o_.equalize == wds::EqualizePolicy::kDrop) {
      std::cerr << "; " << trained << " samples trained, " << total - trained
                << " left out (the partial batches and the ranks' excess)\n";
    } else {
      std::cerr << "; every sample trained, ranks that run out continue into their next pass\n";
    }
  }

  // NextBatch takes the next batch; with --join every rank learns whether
  // all still have one.
  std::optional<wds::Sample> NextBatch(wds::Loader& loader) {
    absl::StatusOr<std::optional<wds::Sample>> item = loader.Next();
    if (!item.ok()) throw wds::LoaderError(item.status());
    const bool have = item->has_value();
    if (o_.join && !dist_.AllStillHaveData(have)) return std::nullopt;
    return *std::move(item);
  }

  // DecodedImages is the batch's image column (its first) as a tensor on the
  // training device: decoded here, or finished here after the workers decoded
  // it (--decode-in-workers).
  torch::Tensor DecodedImages(const wds::Sample& batch) {
    if (wds::PendingImages* pending = wds::AsPendingImages(batch[0].second)) {
      return wds::PendingImagesToTensor(*pending, dist_.device());
    }
    return wds::GpuJobsToTensor(batch, 0, dist_.device(), gpu_decoder_);
  }

  void RunEpoch(int epoch, int64_t resume_step) {
    EpochStats stats;
    std::unique_ptr<wds::Loader> loader;
    const std::optional<std::string> job =
        resume_step > 0 ? ElasticJob({epoch, resume_step}) : std::nullopt;
    if (job.has_value()) {
      loader = EpochLoader(epoch, &*job);
      LoadElastic({epoch, resume_step}, *job, *loader, stats);
    } else {
      loader = EpochLoader(epoch);
      if (resume_step > 0) LoadRankState({epoch, resume_step}, *loader, stats);
    }
    const Clock::time_point start = Clock::now();
    while (std::optional<wds::Sample> batch = NextBatch(*loader)) {
      wds::MadeTensors decoded;  // --decode-device cuda: the images, decoded on the GPU
      if (o_.decode_on_gpu) {
        decoded.emplace_back((*batch)[0].first, DecodedImages(*batch));
      }
      const wds::TensorBatch t = wds::ToTensorBatch(*batch, {}, {}, decoded);
      const auto [loss_sum, correct] = trainer_.Step(t[0], t[1]);
      stats.loss_sum += loss_sum;
      stats.correct += correct;
      stats.samples += t[1].size(0);
      ++stats.batches;
      LogKeys(epoch, *batch);
      if (dist_.is_main() && o_.log_every > 0 && stats.batches % o_.log_every == 0) {
        std::cerr << "epoch " << epoch << " step " << stats.batches << " loss "
                  << loss_sum / static_cast<double>(t[1].size(0)) << "\n";
      }
      if (o_.crash_after_steps > 0 && ++steps_run_ == o_.crash_after_steps) raise(SIGKILL);
      if (!o_.checkpoint_dir.empty() && o_.checkpoint_every > 0 &&
          stats.batches % o_.checkpoint_every == 0) {
        SaveMidEpoch({epoch, stats.batches}, *loader, stats);
      }
    }
    stats.loop_s = Seconds(Clock::now() - start);
    stats.wait_s += loader->stats().wait_seconds;  // the time Next() waited for batches
    loader.reset();
    dist_.CheckStepCounts(epoch, stats.batches);
    Report(epoch, stats);
    trainer_.SaveCheckpoint({epoch + 1, 0});
  }

  // SaveMidEpoch: every rank writes its loader state, random state and epoch
  // counters; once all have (a barrier), rank 0 writes the model checkpoint,
  // whose name makes the checkpoint the latest.
  void SaveMidEpoch(CheckpointAt at, const wds::Loader& loader, const EpochStats& stats) {
    absl::StatusOr<std::string> state = loader.State();
    if (!state.ok()) Die("checkpoint: " + Message(state.status()));
    // Dropout draws from the training device's generator, the rest from the CPU's.
    const torch::Device device = dist_.device();
    std::ostringstream text;
    text << kRankStateHeader << "\n"
         << stats.batches << " " << stats.samples << " " << stats.correct << " " << std::hexfloat
         << stats.loss_sum << std::defaultfloat << "\n"
         << GeneratorHex(torch::kCPU) << "\n"
         << (device.is_cuda() ? GeneratorHex(device) : "") << "\n"
         << *state << "\n";
    if (absl::Status made = wds::MakeDirectories(o_.checkpoint_dir); !made.ok()) {
      Die("--checkpoint-dir: " + Message(made));
    }
    const std::string path = trainer_.RankStatePath(at);
    WriteAtomically(path, text.str());
    dist_.AllReduce(int64_t{0}, wds::ReduceOp::kSum);  // every rank has written its part
    if (dist_.is_main()) SaveJobState(at, loader);
    trainer_.SaveCheckpoint(at);
  }

  // SaveJobState (rank 0) gathers every rank's loader state of `at` into the
  // job state an elastic resume reads (another --nproc_per_node or
  // --workers; wds/loader/elastic.h).
  void SaveJobState(CheckpointAt at, const wds::Loader& loader) const {
    std::vector<std::string> states;
    for (int r = 0; r < dist_.world_size(); ++r) {
      states.push_back(ReadRankState(trainer_.RankStatePath(at, r)).loader_state);
    }
    absl::StatusOr<std::string> job = loader.JobState(states);
    if (!job.ok()) Die("checkpoint: " + Message(job.status()));
    const std::string path = JobStatePath(at);
    WriteAtomically(path, *job);
  }

  std::string JobStatePath(CheckpointAt at) const {
    char name[64];
    std::snprintf(name, sizeof(name), "job-state-%06d-%06" PRId64 ".json", at.epoch, at.step);
    return o_.checkpoint_dir + "/" + name;
  }

  // ElasticJob is the job state of `at` when it was taken on another layout
  // (world size or workers) than this run's, else nullopt (the ranks then
  // restore their own states, exactly).
  std::optional<std::string> ElasticJob(CheckpointAt at) const {
    std::ifstream in(JobStatePath(at), std::ios::binary);
    if (!in) return std::nullopt;  // a checkpoint of a build without job states
    std::string job((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<wds::JobStateInfo> info = wds::DescribeJobState(job);
    if (!info.ok()) Die(JobStatePath(at) + ": " + Message(info.status()));
    if (info->world_size == dist_.world_size() && info->workers == o_.workers) return std::nullopt;
    if (dist_.is_main()) {
      std::cerr << "wds-train: the checkpoint was taken by " << info->world_size << " rank(s) x "
                << info->workers << " worker(s); finishing epoch " << at.epoch << " on "
                << dist_.world_size() << " x " << o_.workers << "\n";
    }
    return job;
  }

  // LoadElastic continues a checkpoint taken on another layout: the loader
  // reads this rank's share of the epoch's leftover; the epoch's counters
  // are the old ranks' sums (on rank 0, so that the all-reduced report is
  // the epoch's), its step count theirs; the random state is that of the old
  // rank of the same number, or rank 0's.
  void LoadElastic(CheckpointAt at, const std::string& job, wds::Loader& loader,
                   EpochStats& stats) {
    const wds::JobStateInfo info = wds::DescribeJobState(job).value();
    stats.batches = at.step;
    for (int r = 0; r < info.world_size && dist_.is_main(); ++r) {
      const RankState old = ReadRankState(trainer_.RankStatePath(at, r));
      stats.samples += old.stats.samples;
      stats.correct += old.stats.correct;
      stats.loss_sum += old.stats.loss_sum;
    }
    const int own = dist_.rank() < info.world_size ? dist_.rank() : 0;
    const std::string path = trainer_.RankStatePath(at, own);
    RestoreGenerators(ReadRankState(path), path);
    if (absl::Status s = loader.Restore(job); !s.ok()) Die(JobStatePath(at) + ": " + Message(s));
  }

  // LoadRankState restores this rank's part of a mid-epoch checkpoint.
  void LoadRankState(CheckpointAt at, wds::Loader& loader, EpochStats& stats) {
    const std::string path = trainer_.RankStatePath(at);
    const RankState state = ReadRankState(path);
    stats = state.stats;
    RestoreGenerators(state, path);
    if (absl::Status s = loader.Restore(state.loader_state); !s.ok()) Die(path + ": " + Message(s));
  }

  void RestoreGenerators(const RankState& state, const std::string& path) const {
    const torch::Device device = dist_.device();
    if (device.is_cuda() && state.device_rng.empty()) {
      Die("checkpoint: " + path + " holds no generator state of " + device.str() +
          " (it was written by a run on the CPU)");
    }
    RestoreGenerator(torch::kCPU, state.cpu_rng, path);
    if (device.is_cuda()) RestoreGenerator(device, state.device_rng, path);
  }

  void LogKeys(int epoch, const wds::Sample& batch) {
    if (!keys_.is_open()) return;
    if (const wds::TextList* keys = KeysOf(batch)) {
      for (const std::string& key : *keys) keys_ << epoch << '\t' << key << '\n';
    }
    // Flushed per batch: a rank that dies (a failed collective, SIGKILL) has
    // logged every batch it trained on.
    keys_.flush();
  }

  // Report all-reduces the epoch's metrics; rank 0 prints them.
  void Report(int epoch, const EpochStats& stats) {
    std::vector<double> sums = dist_.AllReduce(
        std::vector<double>{stats.loss_sum, static_cast<double>(stats.correct),
                            static_cast<double>(stats.samples), stats.wait_s, stats.loop_s},
        wds::ReduceOp::kSum);
    const double slowest = dist_.AllReduce(stats.loop_s, wds::ReduceOp::kMax);
    const double seen = std::max(sums[2], 1.0);
    train_loss_ = sums[0] / seen;
    test_accuracy_ = o_.test.empty() ? std::nullopt : std::optional<double>(trainer_.Evaluate());
    batches_.push_back(stats.batches);
    samples_.push_back(stats.samples);
    wait_s_ += stats.wait_s;
    loop_s_ += stats.loop_s;
    if (!dist_.is_main()) return;
    char test[16] = "-";
    if (test_accuracy_) std::snprintf(test, sizeof(test), "%.4f", *test_accuracy_);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "epoch %d: loss %.4f  train acc %.4f  test acc %s  %.0f samples/s  "
                  "data wait %.1f%%  (%.0f samples, %.1f s)",
                  epoch, sums[0] / seen, sums[1] / seen, test, sums[2] / std::max(slowest, 1e-9),
                  100.0 * sums[3] / std::max(sums[4], 1e-9), sums[2], slowest);
    std::cerr << line << std::endl;
  }

  void PrintSummary() const {
    std::ostringstream out;
    out << "{\"rank\": " << dist_.rank() << ", \"world_size\": " << dist_.world_size()
        << ", \"batches\": " << JsonList(batches_) << ", \"samples\": " << JsonList(samples_)
        << ", \"train_loss\": " << JsonNumber(train_loss_)
        << ", \"test_accuracy\": " << JsonNumber(test_accuracy_) << ", \"data_wait_fraction\": "
        << JsonNumber(loop_s_ > 0 ? std::optional<double>(wait_s_ / loop_s_) : std::nullopt)
        << ", \"params_hash\": \"" << trainer_.ParamsHash() << "\"}\n";
    std::cout << out.str() << std::flush;
  }

  static std::string JsonList(const std::vector<int64_t>& values) {
    std::string text = "[";
    for (size_t i = 0; i < values.size(); ++i) {
      text += (i == 0 ? "" : ", ") + std::to_string(values[i]);
    }
    return text + "]";
  }

  static std::string JsonNumber(std::optional<double> value) {
    if (!value || !std::isfinite(*value)) return "null";
    char text[32];
    std::snprintf(text, sizeof(text), "%.6g", *value);
    return text;
  }

  const Options& o_;
  const wds::DistributedContext& dist_;
  Trainer trainer_;
  std::unique_ptr<wds::GpuBatchDecoder> gpu_decoder_;  // --decode-device cuda
  std::shared_ptr<wds::GpuWorkerDecoders> gpu_workers_;  // --decode-in-workers
  std::vector<std::string> shards_;
  std::shared_ptr<const wds::DatasetIndex> index_;
  wds::Pipeline recipe_;
  wds::ShardSampleCounts counts_;
  std::ofstream keys_;
  std::vector<int64_t> batches_;
  std::vector<int64_t> samples_;
  std::optional<double> train_loss_;
  std::optional<double> test_accuracy_;
  double wait_s_ = 0;
  double loop_s_ = 0;
  int64_t steps_run_ = 0;
};

wds::DistributedOptions DistOptions(const Options& o) {
  wds::DistributedOptions options;
  options.timeout = std::chrono::seconds(o.timeout_s);
  if (!o.device.empty()) options.device = torch::Device(o.device);
  if (o.shared_gpu) {
    if (!options.device) options.device = torch::Device(torch::kCUDA, 0);
    options.backend = wds::DistributedBackend::kGloo;
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  if (options.threads > 0) torch::set_num_threads(options.threads);
  torch::manual_seed(options.seed);
  int rank = -1;
  try {
    wds::DistributedContext dist = wds::DistributedContext::FromEnvironment(DistOptions(options));
    rank = dist.rank();
    Run(options, dist).Main();
  } catch (const c10::Error& e) {
    std::cerr << "wds-train: rank " << rank << ": " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "wds-train: rank " << rank << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
