// The page trident-text-generation-server serves at GET /, as Megatron's server serves its
// megatron/static/index.html: a prompt box whose text, with the settings beside it, is
// PUT to /api, and the answer shown under it.
#pragma once

namespace trident {

inline constexpr const char* kTextGenerationPage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>trident text generation</title>
<style>
  body { font-family: sans-serif; max-width: 52em; margin: 2em auto; padding: 0 1em; }
  textarea { width: 100%; height: 8em; font: inherit; }
  label { margin-right: 1em; }
  input[type=number] { width: 5em; }
  #answer { white-space: pre-wrap; border-top: 1px solid #ccc; margin-top: 1em; padding-top: 1em; }
  .prompt { color: #666; }
</style>
</head>
<body>
<h1>trident text generation</h1>
<textarea id="prompt" placeholder="A prompt to continue"></textarea>
<p>
  <label>tokens <input id="tokens" type="number" min="1" value="64"></label>
  <label>temperature <input id="temperature" type="number" min="0.01" max="100" step="0.1" value="1.0"></label>
  <label>top_k <input id="top_k" type="number" min="0" max="1000" value="0"></label>
  <label>top_p <input id="top_p" type="number" min="0" max="1" step="0.05" value="0.9"></label>
  <button id="go">Generate</button>
</p>
<div id="answer"></div>
<script>
const $ = id => document.getElementById(id);
$("go").onclick = async () => {
  const prompt = $("prompt").value, answer = $("answer");
  const topK = parseInt($("top_k").value) || 0;
  const body = {prompts: [prompt], tokens_to_generate: parseInt($("tokens").value) || 64,
                temperature: parseFloat($("temperature").value) || 1.0, top_k: topK,
                top_p: topK > 0 ? 0.0 : (parseFloat($("top_p").value) || 0.0), add_BOS: prompt === ""};
  answer.textContent = "generating...";
  $("go").disabled = true;
  try {
    const r = await fetch("/api", {method: "PUT", headers: {"Content-Type": "application/json"},
                                   body: JSON.stringify(body)});
    const j = await r.json();
    if (!r.ok) { answer.textContent = "error " + r.status + ": " + j.message; return; }
    const text = j.text[0];
    answer.textContent = "";
    const shown = document.createElement("span");
    shown.className = "prompt";
    shown.textContent = text.startsWith(prompt) ? prompt : "";
    answer.append(shown, text.slice(shown.textContent.length));
  } catch (e) {
    answer.textContent = "error: " + e;
  } finally {
    $("go").disabled = false;
  }
};
</script>
</body>
</html>
)HTML";

}  // namespace trident
