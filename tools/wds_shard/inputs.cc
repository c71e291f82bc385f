#include "inputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <utility>

#include "common.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/shard_roller.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/io/byte_stream.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_writer.h"

namespace wds::tools {
namespace {

namespace fs = std::filesystem;

// CheckField refuses fields the writer would drop or a reader would split
// differently.
absl::Status CheckField(std::string_view field, std::string_view where) {
  if (field.empty()) return absl::InvalidArgumentError(Cat(where, ": empty field name"));
  if (field[0] == '_') {
    return absl::InvalidArgumentError(
        Cat(where, ": field '", field, "' starts with '_', which marks metadata"));
  }
  if (field.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError(Cat(where, ": field '", field, "' holds a '/'"));
  }
  return absl::OkStatus();
}

absl::Status CheckKey(std::string_view key, std::string_view where) {
  if (!IsWritableKey(key)) {
    return absl::InvalidArgumentError(
        Cat(where, ": key '", key, "': its last path segment must be non-empty and hold no dot"));
  }
  return absl::OkStatus();
}

// StatReadable returns the size of the regular file at `path`, or an error
// naming it.
absl::StatusOr<int64_t> StatReadable(const std::string& path, std::string_view where) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, Cat(where, path, ": cannot read"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(Cat(where, path, ": not a regular file"));
  }
  if (access(path.c_str(), R_OK) != 0) {
    return absl::ErrnoToStatus(errno, Cat(where, path, ": cannot read"));
  }
  return static_cast<int64_t>(st.st_size);
}

// AddField adds `field` to `fields`, refusing a field the sample already has
// (compared as a reader does, ignoring ASCII case).
absl::Status AddField(std::vector<FieldSource>& fields, FieldSource field, std::string_view key) {
  const std::string lower = AsciiLower(field.field);
  for (const FieldSource& f : fields) {
    if (AsciiLower(f.field) == lower) {
      auto origin = [](const FieldSource& s) {
        return !s.path.empty() ? s.path : !s.origin.empty() ? s.origin : "an inline value";
      };
      return absl::InvalidArgumentError(
          Cat("key '", key, "' has two members for field '", lower, "': ", origin(f)) +
          Cat(" and ", origin(field)));
    }
  }
  fields.push_back(std::move(field));
  return absl::OkStatus();
}

void SortFields(std::vector<FieldSource>& fields) {
  std::sort(fields.begin(), fields.end(),
            [](const FieldSource& a, const FieldSource& b) { return a.field < b.field; });
}

class VectorSampleInput : public SampleInput {
 public:
  VectorSampleInput(std::vector<SampleSource> samples, std::string notes)
      : samples_(std::move(samples)), notes_(std::move(notes)) {}
  absl::StatusOr<std::optional<SampleSource>> Next() override {
    if (next_ == samples_.size()) return std::nullopt;
    return std::move(samples_[next_++]);
  }
  int64_t total() const override { return static_cast<int64_t>(samples_.size()); }
  std::string notes() const override { return notes_; }

 private:
  std::vector<SampleSource> samples_;
  std::string notes_;
  size_t next_ = 0;
};

// TreeCollector lists the files of directory trees as samples keyed by
// relative path.
class TreeCollector {
 public:
  // extra is added to every new key (ImageFolder's cls), if it has a field.
  absl::Status Walk(const std::string& dir, const std::string& key_prefix,
                    const FieldSource& extra);
  std::vector<SampleSource> TakeSamples();
  size_t size() const { return samples_.size(); }

 private:
  absl::Status AddFile(const std::string& path, const std::string& key_prefix,
                       const std::string& name, const FieldSource& extra);

  std::map<std::string, std::vector<FieldSource>> samples_;
  // The directories being walked, by device and inode: a symlink back to one
  // of them would recurse forever.
  std::set<std::pair<dev_t, ino_t>> open_dirs_;
};

absl::Status TreeCollector::Walk(const std::string& dir, const std::string& key_prefix,
                                 const FieldSource& extra) {
  if (Interrupted()) return absl::CancelledError("interrupted");
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, Cat(dir, ": cannot read"));
  const std::pair<dev_t, ino_t> id(st.st_dev, st.st_ino);
  if (!open_dirs_.insert(id).second) {
    return absl::InvalidArgumentError(Cat(dir, ": a symbolic link loops back to a parent"));
  }
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return absl::PermissionDeniedError(Cat(dir, ": cannot list: ", ec.message()));
  for (const std::string& name : names) {
    if (name[0] == '.') continue;
    const std::string path = Cat(dir, "/", name);
    struct stat entry;
    if (stat(path.c_str(), &entry) != 0) {
      return absl::ErrnoToStatus(errno, Cat(path, ": cannot read"));
    }
    absl::Status added = S_ISDIR(entry.st_mode) ? Walk(path, Cat(key_prefix, name, "/"), extra)
                                                : AddFile(path, key_prefix, name, extra);
    if (!added.ok()) return added;
  }
  open_dirs_.erase(id);
  return absl::OkStatus();
}

absl::Status TreeCollector::AddFile(const std::string& path, const std::string& key_prefix,
                                    const std::string& name, const FieldSource& extra) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) {
    return absl::InvalidArgumentError(
        Cat(path, ": the name has no dot, so it has no field (a file 'KEY.FIELD' is wanted)"));
  }
  FieldSource field;
  field.field = name.substr(dot + 1);
  if (absl::Status s = CheckField(field.field, path); !s.ok()) return s;
  absl::StatusOr<int64_t> size = StatReadable(path, "");
  if (!size.ok()) return size.status();
  field.path = path;
  field.size = *size;
  const std::string key = Cat(key_prefix, name.substr(0, dot));
  auto [it, inserted] = samples_.try_emplace(key);
  if (inserted && !extra.field.empty()) it->second.push_back(extra);
  return AddField(it->second, std::move(field), key);
}

std::vector<SampleSource> TreeCollector::TakeSamples() {
  std::vector<SampleSource> out;
  out.reserve(samples_.size());
  for (auto& [key, fields] : samples_) {
    SortFields(fields);
    out.push_back({key, std::move(fields)});
  }
  samples_.clear();
  return out;
}

absl::StatusOr<Input> OpenTree(const std::string& root) {
  TreeCollector collector;
  if (absl::Status s = collector.Walk(root, "", FieldSource()); !s.ok()) return s;
  Input input;
  input.samples = VectorInput(collector.TakeSamples(), "");
  return input;
}

absl::StatusOr<Input> OpenImageFolder(const std::string& root) {
  std::error_code ec;
  std::vector<std::string> classes;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name[0] == '.') continue;
    if (fs::is_directory(it->path())) {
      classes.push_back(name);
    } else {
      Warn(Cat("imagefolder: ignoring ", root, "/", name, ": not in a class directory"));
    }
  }
  if (ec) return absl::PermissionDeniedError(Cat(root, ": cannot list: ", ec.message()));
  std::sort(classes.begin(), classes.end());
  TreeCollector collector;
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].find('\n') != std::string::npos) {
      return absl::InvalidArgumentError(Cat(root, "/", classes[i], ": class name holds a newline"));
    }
    const std::string label = std::to_string(i);
    const std::string dir = Cat(root, "/", classes[i]);
    FieldSource cls{"cls", "", Buffer::Copy(label), static_cast<int64_t>(label.size()),
                    Cat("the class index of ", dir)};
    const size_t before = collector.size();
    if (absl::Status s = collector.Walk(dir, classes[i] + "/", cls); !s.ok()) return s;
    if (collector.size() == before) {
      return absl::InvalidArgumentError(Cat(dir, ": class directory holds no files"));
    }
  }
  Input input;
  input.samples = VectorInput(collector.TakeSamples(), "");
  input.classes = std::move(classes);
  return input;
}

// ListingReader collects listing lines into samples, in listing order.
class ListingReader {
 public:
  explicit ListingReader(std::string path) : path_(std::move(path)) {
    const size_t slash = path_.rfind('/');
    base_ = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
  }

  absl::StatusOr<std::vector<SampleSource>> Read(bool json) {
    std::ifstream in(path_);
    if (!in) return absl::NotFoundError(Cat(path_, ": cannot open: ", std::strerror(errno)));
    std::string line;
    while (std::getline(in, line)) {
      ++line_number_;
      if (line.empty() || line[0] == '#' || line.find_first_not_of(" \t\r") == std::string::npos) {
        continue;
      }
      if (absl::Status s = json ? ParseJsonLine(line) : ParseTsvLine(line); !s.ok()) return s;
    }
    if (in.bad()) return absl::DataLossError(Cat(path_, ": read error"));
    return std::move(samples_);
  }

 private:
  std::string Where() const { return Cat(path_, ":", std::to_string(line_number_)); }

  absl::Status StartSample(std::string key) {
    if (absl::Status s = CheckKey(key, Where()); !s.ok()) return s;
    auto [it, inserted] = key_lines_.emplace(key, line_number_);
    if (!inserted) {
      return absl::InvalidArgumentError(Cat(
          Where(), ": key '", key, "' was already listed on line ", std::to_string(it->second)));
    }
    samples_.push_back({std::move(key), {}});
    return absl::OkStatus();
  }

  absl::Status AddPath(std::string field, std::string_view path) {
    if (absl::Status s = CheckField(field, Where()); !s.ok()) return s;
    FieldSource source;
    source.field = std::move(field);
    source.path = !path.empty() && path[0] == '/' ? std::string(path) : Cat(base_, path);
    absl::StatusOr<int64_t> size = StatReadable(source.path, Where() + ": ");
    if (!size.ok()) return size.status();
    source.size = *size;
    return AddTo(std::move(source));
  }

  absl::Status AddInline(std::string field, const std::string& text) {
    if (absl::Status s = CheckField(field, Where()); !s.ok()) return s;
    return AddTo({std::move(field), "", Buffer::Copy(text), static_cast<int64_t>(text.size()),
                  Where() + ": an inline value"});
  }

  absl::Status AddTo(FieldSource source) {
    SampleSource& sample = samples_.back();
    absl::Status added = AddField(sample.fields, std::move(source), sample.key);
    if (!added.ok()) {
      return absl::InvalidArgumentError(Cat(Where(), ": ", std::string(added.message())));
    }
    return absl::OkStatus();
  }

  absl::Status Finish() {
    SampleSource& sample = samples_.back();
    if (sample.fields.empty()) {
      return absl::InvalidArgumentError(Cat(Where(), ": key '", sample.key, "' has no fields"));
    }
    SortFields(sample.fields);
    return absl::OkStatus();
  }

  absl::Status ParseTsvLine(const std::string& line) {
    std::vector<std::string_view> columns;
    std::string_view rest = line;
    if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
    while (true) {
      const size_t tab = rest.find('\t');
      columns.push_back(rest.substr(0, tab));
      if (tab == std::string_view::npos) break;
      rest.remove_prefix(tab + 1);
    }
    if (absl::Status s = StartSample(std::string(columns[0])); !s.ok()) return s;
    for (size_t i = 1; i < columns.size(); ++i) {
      const size_t eq = columns[i].find('=');
      if (eq == std::string_view::npos) {
        return absl::InvalidArgumentError(
            Cat(Where(), ": column '", columns[i], "' is not FIELD=PATH"));
      }
      absl::Status s = AddPath(std::string(columns[i].substr(0, eq)), columns[i].substr(eq + 1));
      if (!s.ok()) return s;
    }
    return Finish();
  }

  absl::Status ParseJsonLine(const std::string& line) {
    nlohmann::json doc = nlohmann::json::parse(line, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) {
      return absl::InvalidArgumentError(Cat(Where(), ": not a JSON object"));
    }
    auto key = doc.find("__key__");
    if (key == doc.end() || !key->is_string()) {
      return absl::InvalidArgumentError(Cat(Where(), ": no string \"__key__\""));
    }
    if (absl::Status s = StartSample(key->get<std::string>()); !s.ok()) return s;
    for (auto& [field, value] : doc.items()) {
      if (field == "__key__") continue;
      absl::Status s;
      if (value.is_string()) {
        s = AddPath(field, value.get<std::string>());
      } else if (value.is_number()) {
        s = AddInline(field, value.dump());
      } else {
        s = absl::InvalidArgumentError(
            Cat(Where(), ": field '", field, "' must be a path (string) or a number"));
      }
      if (!s.ok()) return s;
    }
    return Finish();
  }

  std::string path_;
  std::string base_;
  int64_t line_number_ = 0;
  std::vector<SampleSource> samples_;
  std::unordered_map<std::string, int64_t> key_lines_;
};

// TarInput regroups the members of tars by key, keeping member names.
class TarInput : public SampleInput {
 public:
  explicit TarInput(std::vector<std::string> urls) : urls_(std::move(urls)) {}

  absl::StatusOr<std::optional<SampleSource>> Next() override {
    while (true) {
      if (reader_ == nullptr) {
        if (next_url_ == urls_.size()) return std::nullopt;
        if (absl::Status s = Open(urls_[next_url_++]); !s.ok()) return s;
      }
      absl::StatusOr<std::optional<GroupedSample>> grouped = reader_->Next();
      if (!grouped.ok()) return grouped.status();
      if (grouped->has_value()) return ToSource(**std::move(grouped));
      reader_.reset();
    }
  }

  std::string notes() const override {
    if (skipped_ == 0) return "";
    return std::to_string(skipped_) +
           " member(s) without a field or with a metadata name were left out (a reader skips "
           "them too)";
  }

 private:
  absl::Status Open(const std::string& url) {
    absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(url);
    if (!stream.ok()) return stream.status();
    ShardSampleReaderOptions options;
    options.on_skipped = [this](const TarMember&) {
      ++skipped_;
      return true;
    };
    absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
        ShardSampleReader::Open(*std::move(stream), std::move(options));
    if (!reader.ok()) return reader.status();
    reader_ = *std::move(reader);
    url_ = url;
    return absl::OkStatus();
  }

  absl::StatusOr<SampleSource> ToSource(GroupedSample grouped) {
    SampleSource sample{std::move(grouped.key), {}};
    for (SampleMember& m : grouped.members) {
      const std::string where =
          Cat(url_, ": member ", m.member.name, " at offset ", std::to_string(m.member.offset));
      if (absl::Status s = CheckField(m.field, where); !s.ok()) return s;
      FieldSource field{m.field, "", std::move(m.member.data), 0,
                        Cat("member ", m.member.name, " at offset ", m.member.offset)};
      field.size = static_cast<int64_t>(field.data.size());
      absl::Status added = AddField(sample.fields, std::move(field), sample.key);
      if (!added.ok()) {
        return absl::InvalidArgumentError(Cat(where, ": ", std::string(added.message())));
      }
    }
    SortFields(sample.fields);
    return sample;
  }

  std::vector<std::string> urls_;
  size_t next_url_ = 0;
  std::unique_ptr<ShardSampleReader> reader_;
  std::string url_;
  int64_t skipped_ = 0;
};

InputFormat Detect(const std::string& input) {
  if (input == "-" || StartsWith(input, "pipe:") || StartsWith(input, "file:") ||
      input.find("://") != std::string::npos) {
    return InputFormat::kTar;
  }
  struct stat st;
  // A name that is no file may be a brace pattern of shards; the reader
  // names whatever cannot be opened.
  if (stat(input.c_str(), &st) != 0) return InputFormat::kTar;
  if (S_ISDIR(st.st_mode)) return InputFormat::kTree;
  if (EndsWith(input, ".tsv")) return InputFormat::kTsv;
  if (EndsWith(input, ".jsonl") || EndsWith(input, ".ndjson")) return InputFormat::kJsonl;
  return InputFormat::kTar;
}

absl::StatusOr<Input> OpenListing(const std::string& path, bool json) {
  absl::StatusOr<std::vector<SampleSource>> samples = ListingReader(path).Read(json);
  if (!samples.ok()) return samples.status();
  Input input;
  input.samples = VectorInput(*std::move(samples), "");
  return input;
}

absl::StatusOr<Input> OpenTars(const std::vector<std::string>& inputs) {
  std::vector<std::string> urls;
  for (const std::string& input : inputs) {
    absl::StatusOr<std::vector<std::string>> expanded = ExpandUrls(input);
    if (!expanded.ok()) return expanded.status();
    urls.insert(urls.end(), expanded->begin(), expanded->end());
  }
  Input input;
  input.samples = std::make_unique<TarInput>(std::move(urls));
  return input;
}

absl::StatusOr<std::string> OneInput(const std::vector<std::string>& inputs) {
  if (inputs.size() != 1) {
    return absl::InvalidArgumentError(
        "this input format takes exactly one input (only tar inputs may be several)");
  }
  std::string input = inputs[0];
  while (input.size() > 1 && input.back() == '/') input.pop_back();
  return input;
}

}  // namespace

absl::StatusOr<InputFormat> ParseInputFormat(std::string_view name) {
  static const std::pair<std::string_view, InputFormat> kNames[] = {
      {"auto", InputFormat::kAuto},
      {"tree", InputFormat::kTree},
      {"imagefolder", InputFormat::kImageFolder},
      {"tsv", InputFormat::kTsv},
      {"jsonl", InputFormat::kJsonl},
      {"tar", InputFormat::kTar}};
  for (const auto& [n, f] : kNames) {
    if (n == name) return f;
  }
  return absl::InvalidArgumentError(
      Cat("unknown input format '", name, "' (auto, tree, imagefolder, tsv, jsonl or tar)"));
}

int64_t SampleSource::Footprint() const {
  int64_t bytes = 0;
  for (const FieldSource& f : fields) bytes += MemberFootprint(Cat(key, ".", f.field), f.size);
  return bytes;
}

int64_t SampleSource::DataBytes() const {
  int64_t bytes = 0;
  for (const FieldSource& f : fields) bytes += f.size;
  return bytes;
}

std::unique_ptr<SampleInput> VectorInput(std::vector<SampleSource> samples, std::string notes) {
  return std::make_unique<VectorSampleInput>(std::move(samples), std::move(notes));
}

absl::StatusOr<Input> OpenInput(InputFormat format, const std::vector<std::string>& inputs) {
  if (inputs.empty()) return absl::InvalidArgumentError("no input given");
  if (format == InputFormat::kAuto && inputs.size() == 1) {
    format = Detect(inputs[0]);
  }
  if (format == InputFormat::kAuto || format == InputFormat::kTar) return OpenTars(inputs);
  absl::StatusOr<std::string> input = OneInput(inputs);
  if (!input.ok()) return input.status();
  absl::StatusOr<Input> opened = format == InputFormat::kTree ? OpenTree(*input)
                                 : format == InputFormat::kImageFolder
                                     ? OpenImageFolder(*input)
                                     : OpenListing(*input, format == InputFormat::kJsonl);
  if (opened.ok() && opened->samples->total() == 0) {
    return absl::InvalidArgumentError(Cat(*input, ": no samples found"));
  }
  return opened;
}

absl::StatusOr<Sample> LoadSample(const SampleSource& source) {
  Sample sample;
  sample.Set(std::string(kKeyField), source.key);
  for (const FieldSource& f : source.fields) {
    if (f.path.empty()) {
      sample.Set(f.field, f.data);
      continue;
    }
    const int fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::ErrnoToStatus(errno, Cat(f.path, ": cannot read"));
    Buffer data = Buffer::Allocate(static_cast<size_t>(f.size));
    size_t filled = 0;
    while (true) {
      // One byte more than expected is asked for, to notice a file that grew.
      char extra;
      const bool at_end = filled == data.size();
      ssize_t n = at_end ? read(fd, &extra, 1)
                         : read(fd, data.mutable_data() + filled, data.size() - filled);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int error = errno;
        close(fd);
        return absl::ErrnoToStatus(error, Cat(f.path, ": cannot read"));
      }
      if (n == 0 || at_end) {
        close(fd);
        if (filled != data.size() || n != 0) {
          return absl::DataLossError(Cat(f.path, ": the file changed size while being packed"));
        }
        break;
      }
      filled += static_cast<size_t>(n);
    }
    sample.Set(f.field, std::move(data));
  }
  return sample;
}

}  // namespace wds::tools
