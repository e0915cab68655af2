#include "service/observe/log_format.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "service/testing/flat_json.h"

namespace gemm {
namespace {

// The default logger replaced by one writing into a string, for one test.
class CapturedLog {
 public:
  explicit CapturedLog(LogFormat format) : saved_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("gemm_test", sink);
    logger->set_formatter(MakeLogFormatter(format));
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() {
    spdlog::set_default_logger(saved_);
    // The registry keeps every default logger by name: drop this one, whose
    // sink writes into a member that is about to go.
    spdlog::drop("gemm_test");
  }
  std::vector<std::string> Lines() const {
    return absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  }

 private:
  std::shared_ptr<spdlog::logger> saved_;
  std::ostringstream out_;
};

using JsonObject = std::map<std::string, std::string>;

JsonObject ParseJson(const std::string& line) {
  auto parsed = testing_json::ParseFlatObject(line);
  EXPECT_TRUE(parsed.has_value()) << "not a JSON object of strings: " << line;
  return parsed.value_or(JsonObject{});
}

std::string Field(const JsonObject& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? "<absent>" : it->second;
}

TEST(LogFormatTest, ParseLogFormatNamesTheFlagAndValues) {
  EXPECT_EQ(*ParseLogFormat("text", "log_format"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json", "log_format"), LogFormat::kJson);
  absl::StatusOr<LogFormat> bad = ParseLogFormat("xml", "log_format");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "--log_format"));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "text, json"));
}

TEST(LogFormatTest, JsonLinesParseWithFieldsAndHostileStrings) {
  CapturedLog log(LogFormat::kJson);
  const std::string hostile = "a \"quoted\" \\ name\nwith a newline\tand \x01 and \xff bytes";
  LogWithFields(spdlog::level::warn, "refused: " + hostile,
                {{"code", "INVALID_ARGUMENT"}, {"caller", hostile}, {"message", "clash"}});
  spdlog::info("plain {} line", 1);
  std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), 2u);
  JsonObject first = ParseJson(lines[0]);
  EXPECT_EQ(Field(first, "level"), "warning");
  EXPECT_EQ(Field(first, "logger"), "gemm_test");
  EXPECT_EQ(Field(first, "code"), "INVALID_ARGUMENT");
  // Everything but the byte that is not UTF-8 comes back unchanged.
  const std::string expected = "a \"quoted\" \\ name\nwith a newline\tand \x01 and \xef\xbf\xbd bytes";
  EXPECT_EQ(Field(first, "caller"), expected);
  EXPECT_EQ(Field(first, "message"), "refused: " + expected);
  // A field named like a fixed key does not replace it.
  EXPECT_EQ(Field(first, "field_message"), "clash");
  EXPECT_TRUE(absl::EndsWith(Field(first, "time"), "Z")) << Field(first, "time");
  JsonObject second = ParseJson(lines[1]);
  EXPECT_EQ(Field(second, "message"), "plain 1 line");
  EXPECT_EQ(Field(second, "level"), "info");
  EXPECT_EQ(Field(second, "code"), "<absent>");
}

TEST(LogFormatTest, TextLinesCarryFieldsQuotedWhereNeeded) {
  CapturedLog log(LogFormat::kText);
  LogWithFields(spdlog::level::info, "Gemm refused: queue full",
                {{"code", "RESOURCE_EXHAUSTED"}, {"caller", "x509:CN=a b"}, {"field", ""}});
  std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines[0], "[info] Gemm refused: queue full"
                                          " code=RESOURCE_EXHAUSTED caller=\"x509:CN=a b\" "
                                          "field=\"\""))
      << lines[0];
}

TEST(LogFormatTest, FieldsBelowTheLevelAreNotFormatted) {
  CapturedLog log(LogFormat::kText);
  spdlog::default_logger()->set_level(spdlog::level::warn);
  LogWithFields(spdlog::level::info, "hidden", {{"k", "v"}});
  EXPECT_TRUE(log.Lines().empty());
}

TEST(LogFormatTest, TheTestsJsonParserIsStrict) {
  EXPECT_TRUE(testing_json::ParseFlatObject(R"({"a":"b\u00e9\n"})").has_value());
  EXPECT_EQ((*testing_json::ParseFlatObject(R"({"a":"\u00e9"})"))["a"], "\xc3\xa9");
  EXPECT_FALSE(testing_json::ParseFlatObject("{\"a\":\"b\nc\"}").has_value());  // raw newline
  EXPECT_FALSE(testing_json::ParseFlatObject(R"({"a":"b")").has_value());
  EXPECT_FALSE(testing_json::ParseFlatObject(R"({"a":"b"} x)").has_value());
  EXPECT_FALSE(testing_json::ParseFlatObject(R"({"a":"\q"})").has_value());
  EXPECT_FALSE(testing_json::ParseFlatObject(R"({"a":"b","a":"c"})").has_value());
}

TEST(LogFormatTest, JsonEscapeAndUtf8) {
  EXPECT_EQ(JsonEscape("plain"), "plain");
  EXPECT_EQ(JsonEscape("\"\\\n\r\t\x1f"), "\\\"\\\\\\n\\r\\t\\u001f");
  EXPECT_EQ(JsonEscape("h\xc3\xa9llo"), "h\xc3\xa9llo");           // é kept
  EXPECT_EQ(JsonEscape("\xc3"), "\\ufffd");                         // truncated
  EXPECT_EQ(JsonEscape("\xc0\xaf"), "\\ufffd\\ufffd");              // overlong
  EXPECT_EQ(JsonEscape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");   // surrogate
  EXPECT_EQ(Utf8SequenceLength("\xf0\x9f\x98\x80"), 4u);
}

}  // namespace
}  // namespace gemm
