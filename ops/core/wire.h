// Wire: a minimal byte writer/reader for messages between ranks of the same build.
//
// All ranks run the same binary on the same architecture, so integers are written in host byte
// order. The reader checks every length, so a corrupted message is an error, not a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace kerashvd {

class WireWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_.append(s);
  }
  void PutInts(const std::vector<int64_t>& v) {
    Put<uint64_t>(v.size());
    for (int64_t x : v) Put<int64_t>(x);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T* value) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint64_t n;
    if (!Get(&n) || pos_ + n > in_.size()) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool GetInts(std::vector<int64_t>* v) {
    uint64_t n;
    if (!Get(&n) || n > (in_.size() - pos_) / sizeof(int64_t)) return false;
    v->resize(n);
    for (auto& x : *v)
      if (!Get(&x)) return false;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace kerashvd
