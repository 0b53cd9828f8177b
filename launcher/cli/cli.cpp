// cli.cpp: cli_main, the gtrain command line: declares every subcommand (commands.h), names a
// misspelt or missing one, parses, and runs the one given.
#include "launcher/cli/cli.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/cli/commands.h"
#include "launcher/commands/plan_command.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {
namespace {

// The visible subcommands of `a`, for messages.
std::string command_names(const CLI::App* a) {
  std::vector<std::string> names;
  for (const auto* sub : a->get_subcommands([](const CLI::App*) { return true; }))
    if (!sub->get_group().empty()) names.push_back(sub->get_name());
  return join(names);
}

// CLI11 reports a misspelt or missing command as "A subcommand is required" (a config error): a
// usage error naming the command and its choices instead.
void check_command_words(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cur = &app;
  std::string path = "gtrain";
  int i = 1;
  for (; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = cur->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) break;
    const CLI::App* next = nullptr;
    for (const auto* a : subs) {
      if (a->check_name(argv[i])) next = a;
    }
    // A command whose subcommands are optional (`runs` and `runs diff`) takes other words as arguments.
    if (!next && cur != &app && cur->get_require_subcommand_min() == 0) break;
    if (!next) throw UsageError(path + ": unknown command '" + argv[i] + "'; expected one of " + command_names(cur));
    cur = next;
    path += " " + next->get_name();
  }
  const bool help = i < argc && (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help" ||
                                 std::string(argv[i]) == "--version");
  if (!help && cur->get_require_subcommand_min() > 0 && (i == argc || argv[i][0] == '-'))
    throw UsageError(str(path, ": expected a command, one of ", command_names(cur)), str("see ", path, " --help"));
}

}  // namespace

int cli_main(int argc, char** argv, const LibTorchWork& work) {
  set_job_sizer(work.size_job);  // reached deep inside plan, submit and report
  CLI::App app{"gtrain: train on whatever GPUs the scheduler granted, resume on any other count.", "gtrain"};
  app.set_version_flag("--version", "gtrain 0.1.0");
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_run(app, argc, argv, work),
                                         add_config(app),
                                         add_probe(app),
                                         add_plan(app, work),
                                         add_models(app, work),
                                         add_sample(app, work),
                                         add_distill(app, argc, argv, work),
                                         add_sweep(app),
                                         add_status(app),
                                         add_report(app),
                                         add_runs(app),
                                         add_submit(app),
                                         add_cancel(app),
                                         add_cluster(app),
                                         add_chain_step(app),
                                         add_ckpt(app, work),
                                         add_tokenize(app),
                                         add_prepare(app)};
  // Each command's help ends with the docs page that explains it.
  static const std::map<std::string, std::string> kDocs = {{"run", "stages-and-checkpoints"},
                                                           {"config", "configuration"},
                                                           {"probe", "planning"},
                                                           {"plan", "planning"},
                                                           {"models", "models"},
                                                           {"sample", "models"},
                                                           {"distill", "models"},
                                                           {"sweep", "sweeps"},
                                                           {"status", "reports-and-monitoring"},
                                                           {"report", "reports-and-monitoring"},
                                                           {"runs", "runs-and-identity"},
                                                           {"submit", "clusters"},
                                                           {"cancel", "clusters"},
                                                           {"cluster", "cluster-facts"},
                                                           {"chain-step", "clusters"},
                                                           {"ckpt", "stages-and-checkpoints"},
                                                           {"tokenize", "tokenizers"},
                                                           {"prepare", "data-preparation"}};
  // A command's subcommands (config show, ckpt export, ...) end with their parent's page.
  std::function<void(CLI::App*, const std::string&)> set_footer = [&](CLI::App* a, const std::string& page) {
    a->footer("Docs: docs/" + page + ".md");
    for (CLI::App* sub : a->get_subcommands({})) set_footer(sub, page);
  };
  for (const auto& c : commands) {
    const auto page = kDocs.find(c.app->get_name());
    if (page != kDocs.end()) set_footer(c.app, page->second);
  }
  app.footer("Docs: README.md, then docs/ (one page a topic; docs/troubleshooting.md for errors)");
  check_command_words(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw ConfigError(e.what(), "see gtrain --help");
  }
  for (const auto& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return kExitUsage;
}

}  // namespace gtrain
