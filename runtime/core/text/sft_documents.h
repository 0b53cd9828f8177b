// sft_documents.h: a line of data.format = "chat" / "prompt_completion" read, checked and encoded:
// its messages (or prompt and completion) written with the recipe's chat template, its ids, and
// the mask of the ids the loss trains on; a line that is none of these named by file and line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/errors.h"
#include "runtime/core/text/chat_template.h"
#include "runtime/core/text/documents.h"
#include "runtime/core/text/prepare_manifest.h"

namespace gtrain::text {

// A line that is not a conversation: "FILE:LINE: what, expected what". data.on_bad_line = "skip"
// leaves such lines out (and counts them); any other error stops the preparation.
class BadLineError : public DataError {
 public:
  using DataError::DataError;
};

// Sets recipe.chat_template to the family written (`name` as given, "" = the tokenizer's, see
// chat_template_for; `key` names the setting in errors) and recipe.chat_system to its default
// system turn, so the recipe alone decides the text, and its key changes with the template.
void resolve_chat_recipe(PrepareRecipe& recipe, const Tokenizer& tok, const std::string& key);

class ConversationEncoder {
 public:
  // `recipe`: resolved (resolve_chat_recipe), data_format "chat" or "prompt_completion".
  ConversationEncoder(std::shared_ptr<const Tokenizer> tok, const PrepareRecipe& recipe);
  // The ids and mask of line `doc` of `path`. `tools`: whether its object has a "tools" key (ignored).
  // BadLineError for a line that is not JSON, lacks the messages (prompt, completion), has a role
  // other than system / user / assistant, a content that is not a string, or no non-empty
  // assistant turn (completion) to train on.
  EncodedChat encode(const RawDocument& doc, const std::string& path, bool* tools) const;

 private:
  std::shared_ptr<const Tokenizer> tok_;
  PrepareRecipe recipe_;
  ChatTemplate template_;
  TrainOn on_ = TrainOn::assistant;
};

}  // namespace gtrain::text
