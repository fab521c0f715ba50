// `loom prepare`: image-text data in the formats people have (LLaVA
// conversation files, WebDataset shards) into what `loom run --data` reads,
// with the model's own Hugging Face tokenizer, chat template and image
// processor (docs/data-prepare.md). The work is python/prepare/loom_prepare.py,
// which the binary carries (cmake/embed_text.cmake) and runs on the Python of
// requirements.txt (LOOM_PYTHON overrides it): transformers' own processors
// are the reference the ids and pixels must equal, so they do the work.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "loom/cli/command.h"
#include "loom/error.h"

namespace loom::cli {

extern const char* const kPrepareScript;  // generated from python/prepare/loom_prepare.py

namespace {

class PrepareCommand : public Command {
 public:
  explicit PrepareCommand(CLI::App& app)
      : Command(app.add_subcommand("prepare",
                                   "tokenize image-text data (LLaVA JSON/JSONL, WebDataset tar) with the model's own "
                                   "Hugging Face tokenizer and image processor, for `loom run --data`")) {
    CLI::App* c = subcommand();
    c->add_option("--model", model_, "a Hugging Face model folder with its tokenizer (and processor)")->required();
    c->add_option("--input", inputs_, "a LLaVA .json/.jsonl file or a WebDataset .tar shard; repeatable")->required();
    c->add_option("--out", out_, "the output folder (data.jsonl, pixels/, prepare.json)")->required();
    c->add_option("--max-tokens", max_tokens_, "a longer sample is an error, not cut");
    c->add_option("--template", template_, "chat | caption (default: chat where the model has a chat template)");
    c->add_option("--limit", limit_, "the first N samples only");
    c->add_option("--image-folder", image_folder_, "the folder LLaVA image paths are relative to");
  }

  void Run() override {
    std::vector<std::string> args = {"--model", model_, "--out", out_};
    for (const auto& i : inputs_) args.insert(args.end(), {"--input", i});
    if (max_tokens_) args.insert(args.end(), {"--max-tokens", std::to_string(*max_tokens_)});
    if (!template_.empty()) args.insert(args.end(), {"--template", template_});
    if (limit_) args.insert(args.end(), {"--limit", std::to_string(*limit_)});
    if (!image_folder_.empty()) args.insert(args.end(), {"--image-folder", image_folder_});
    const int code = RunScript(args);
    if (code != 0) throw ExitStatus{code};  // the script said why ("loom prepare: error: ...")
  }

 private:
  // Writes the script to a private temporary file and runs it; returns its exit code.
  static int RunScript(const std::vector<std::string>& args) {
    const char* env = std::getenv("LOOM_PYTHON");
    const std::string python = env != nullptr && *env != '\0' ? env : LOOM_PREPARE_PYTHON;
    char path[] = "/tmp/loom-prepare-XXXXXX.py";
    const int fd = mkstemps(path, 3);
    if (fd < 0) throw Error(fmt::format("loom prepare: cannot write its script to /tmp: {}", std::strerror(errno)));
    const std::string_view text(kPrepareScript);
    const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    if (!written) {
      unlink(path);
      throw Error(fmt::format("loom prepare: cannot write its script to {}", path));
    }
    std::vector<std::string> argv = {python, path};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      execvp(cargv[0], cargv.data());
      _exit(127);
    }
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    unlink(path);
    if (pid < 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 127)) {
      throw Error(
          fmt::format("loom prepare: cannot run {}: it needs a Python with requirements.txt installed "
                      "(scripts/install-deps.sh); set LOOM_PYTHON to one",
                      python));
    }
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
  }

  std::string model_, out_, template_, image_folder_;
  std::vector<std::string> inputs_;
  std::optional<int64_t> max_tokens_, limit_;
};

}  // namespace

std::unique_ptr<Command> AddPrepareCommand(CLI::App& app) { return std::make_unique<PrepareCommand>(app); }

}  // namespace loom::cli
