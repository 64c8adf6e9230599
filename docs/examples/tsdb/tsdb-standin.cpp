// tsdb-standin.cpp -- a stand-in with the *shape* of seed 003's C++ TSDB write path (not that
// TSDB): StorageImpl::write looks the series up, creates it on first sight (index insert and an
// immediate block persist: a new file per series), logs the sample to a WAL file and appends it
// in memory. Used by docs/user-guide.md to show a user profile for a C++ write path.
//
//   g++ -std=c++17 -O2 -g -fno-omit-frame-pointer -o tsdb-standin tsdb-standin.cpp
//   ./tsdb-standin --writes N --series S [--dir DIR] [--bad-every K]
//
// Writes go round-robin over S series: with S >= N every write creates its series, with a small
// S nearly every write is an update. Every K-th write carries an empty label set:
// ShardedIndex::add_series throws std::invalid_argument and StorageImpl::write catches it, so
// the exception unwinds through a probed frame (a uretprobe there would kill the process;
// wprof's RET-site probes do not).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <unordered_map>
#include <vector>

#define PHASE __attribute__((noinline, noclone))

namespace tsdb {

struct Sample {
    int64_t t;
    double v;
};

class Series {
  public:
    PHASE explicit Series(uint64_t id, std::string labels) : id_(id), labels_(std::move(labels))
    {
        samples_.reserve(128);
    }
    PHASE void append(const Sample& s) { samples_.push_back(s); }
    PHASE std::vector<Sample> seal_block()
    {
        std::vector<Sample> block;
        block.swap(samples_);
        samples_.reserve(128);
        return block;
    }
    const std::vector<Sample>& samples() const { return samples_; }
    uint64_t id() const { return id_; }

  private:
    uint64_t id_;
    std::string labels_;
    std::vector<Sample> samples_;
};

class ShardedIndex {
  public:
    PHASE Series* lookup(uint64_t id)
    {
        auto it = by_id_.find(id);
        return it == by_id_.end() ? nullptr : it->second.get();
    }
    PHASE void add_series(uint64_t id, std::unique_ptr<Series> s, const std::string& labels)
    {
        if (labels.empty())
            throw std::invalid_argument("empty label set");
        postings_.emplace(labels, id);
        by_id_.emplace(id, std::move(s));
    }

  private:
    std::unordered_map<uint64_t, std::unique_ptr<Series>> by_id_;
    std::multimap<std::string, uint64_t> postings_;
};

class ShardedWAL {
  public:
    explicit ShardedWAL(const std::string& path)
    {
        fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (fd_ < 0)
            throw std::runtime_error("open " + path + ": " + strerror(errno));
    }
    ~ShardedWAL() { close(fd_); }
    PHASE void log(uint64_t id, const Sample& s)
    {
        char rec[32];
        std::memcpy(rec, &id, 8);
        std::memcpy(rec + 8, &s.t, 8);
        std::memcpy(rec + 16, &s.v, 8);
        std::memset(rec + 24, 0, 8);
        if (write(fd_, rec, sizeof rec) != sizeof rec)
            throw std::runtime_error("wal write failed");
    }

  private:
    int fd_;
};

class CacheHierarchy {
  public:
    PHASE void put(uint64_t id, const Sample& s) { last_[id] = s; }

  private:
    std::unordered_map<uint64_t, Sample> last_;
};

class BlockManager {
  public:
    explicit BlockManager(std::string dir) : dir_(std::move(dir)) {}
    // A new file per block: create, write, close (no fsync).
    PHASE void seal_and_persist_block(uint64_t id, const std::vector<Sample>& block)
    {
        std::string path = dir_ + "/block." + std::to_string(id) + "." + std::to_string(seq_++);
        int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            throw std::runtime_error("open " + path + ": " + strerror(errno));
        ssize_t n = write(fd, block.data(), block.size() * sizeof(Sample));
        close(fd);
        if (n < 0)
            throw std::runtime_error("block write failed");
    }

  private:
    std::string dir_;
    uint64_t seq_ = 0;
};

PHASE uint64_t series_id(const std::string& labels)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (unsigned char c : labels)
        h = (h ^ c) * 1099511628211ull;
    return h;
}

class StorageImpl {
  public:
    StorageImpl(const std::string& dir) : wal_(dir + "/wal"), blocks_(dir) {}

    // Returns false when the sample was rejected.
    PHASE bool write(const std::string& labels, const Sample& s)
    {
        try {
            uint64_t id = series_id(labels);
            Series* series = index_.lookup(id);
            bool is_new = series == nullptr;
            if (is_new) {
                auto owned = std::make_unique<Series>(id, labels);
                series = owned.get();
                index_.add_series(id, std::move(owned), labels);
            }
            wal_.log(id, s);
            series->append(s);
            cache_.put(id, s);
            if (is_new || series->samples().size() >= 120) {
                // New series are persisted at once (seed 003's bottleneck), full blocks too.
                auto block = series->seal_block();
                blocks_.seal_and_persist_block(id, block);
            }
            return true;
        } catch (const std::invalid_argument&) {
            rejected_++;
            return false;
        }
    }
    uint64_t rejected() const { return rejected_; }

  private:
    ShardedIndex index_;
    ShardedWAL wal_;
    CacheHierarchy cache_;
    BlockManager blocks_;
    uint64_t rejected_ = 0;
};

} // namespace tsdb

static uint64_t arg(int argc, char** argv, const char* name, uint64_t def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (std::strcmp(argv[i], name) == 0)
            return std::strtoull(argv[i + 1], nullptr, 10);
    return def;
}

int main(int argc, char** argv)
{
    uint64_t writes = arg(argc, argv, "--writes", 10000);
    uint64_t nseries = arg(argc, argv, "--series", 100);
    uint64_t bad_every = arg(argc, argv, "--bad-every", 0);
    std::string dir = "/tmp/tsdb-standin";
    for (int i = 1; i + 1 < argc; i++)
        if (std::strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
    mkdir(dir.c_str(), 0755);
    if (nseries == 0)
        nseries = 1;

    tsdb::StorageImpl storage(dir);
    auto t0 = std::chrono::steady_clock::now();
    uint64_t ok = 0;
    for (uint64_t i = 0; i < writes; i++) {
        bool bad = bad_every > 0 && (i + 1) % bad_every == 0;
        std::string labels = bad ? "" : "host=h" + std::to_string(i % nseries) + ",metric=cpu";
        ok += storage.write(labels, tsdb::Sample{int64_t(i), double(i) * 0.5});
    }
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    std::printf("tsdb-standin: writes=%llu series=%llu ok=%llu rejected=%llu mean_write_ns=%.0f\n",
                (unsigned long long)writes, (unsigned long long)nseries, (unsigned long long)ok,
                (unsigned long long)storage.rejected(), ns / double(writes));
    return 0;
}
