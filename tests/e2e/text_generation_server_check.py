"""HTTP checks of trident-text-generation-server (tests/e2e/text_generation_server.sh).

  text_generation_server_check.py PORT GENERATE_JSONL   the checks; prints ok/FAIL lines
  text_generation_server_check.py PORT --dump FILE      a fixed set of responses, as JSON
  text_generation_server_check.py PORT --leave LOG      clients that leave mid-stream: the
                                                        server's log LOG says it stopped early

GENERATE_JSONL: trident-generate's --sample-output-file for the greedy prompts below, 10
tokens each, the reference the server's greedy text must match.
"""
import http.client
import json
import sys
import threading
import time
import urllib.error
import urllib.request

PORT = int(sys.argv[1])
PROMPTS = ["The history of the", "Hello world, this is a longer prompt about"]
fails = 0


def put(body, method="PUT", raw=None, path="/api"):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def complete(body, path="/v1/completions"):
    return put(body, method="POST", path=path)


def concurrently(bodies, path="/v1/completions"):
    """The answers to the bodies, sent at once from one thread each, in order."""
    results = [None] * len(bodies)
    def send(i):
        results[i] = complete(bodies[i], path=path)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return results


def behind_a_slow_request(bodies):
    """concurrently(bodies), sent while the server decodes 4 prompts x 40 tokens (about 2 s
    on a 2-core machine), so that they wait together (and the greedy ones are decoded as one
    batch)."""
    slow = threading.Thread(target=put, args=(dict(prompts=["x"] * 4, tokens_to_generate=40, no_log=True),))
    slow.start()
    time.sleep(0.3)
    results = concurrently(bodies)
    slow.join()
    return results


LM_EVAL_PROMPTS = [f"Question {i}: what is {i} plus {i}? Answer:" + " the" * (i % 4) for i in range(8)]
lm_eval_body = lambda p: dict(model="gpt2", prompt=[p], temperature=0, max_tokens=1, logprobs=1, seed=1234, echo=True)


def streamed(body, path="/v1/completions"):
    """POSTs body with "stream": true: (status, the events' data in order, Content-Type), or
    (status, the JSON error, None) when refused."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    conn.request("POST", path, body=json.dumps(dict(body, stream=True)), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        return r.status, json.loads(r.read()), None
    events = [line.decode()[len("data: "):].rstrip("\n") for line in r if line.startswith(b"data: ")]
    conn.close()
    return r.status, events, r.getheader("Content-Type")


def joined(events):
    """The answer a stream's chunks make (as the server's unstreamed answer: choices by index,
    each chunk's text and logprobs lists appended), or None if a chunk follows its choice's
    last or the stream does not end with [DONE]."""
    if not events or events[-1] != "[DONE]":
        return None
    out = {"choices": [], "usage": None}
    for e in map(json.loads, events[:-1]):
        out["id"] = e["id"]
        if not e["choices"]:
            out["usage"] = e["usage"]
            continue
        part = e["choices"][0]
        while len(out["choices"]) <= part["index"]:
            out["choices"].append(dict(index=len(out["choices"]), text="", logprobs=None, finish_reason=None))
        c = out["choices"][part["index"]]
        if c["finish_reason"] is not None:
            return None
        c["text"] += part["text"]
        c["finish_reason"] = part["finish_reason"]
        if part["logprobs"] is not None:
            if c["logprobs"] is None:
                c["logprobs"] = part["logprobs"]
            else:
                for k, v in part["logprobs"].items():
                    c["logprobs"][k] += v
    return out


def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        fails += 1


def greedy(prompts, n=10, **extra):
    return put(dict(prompts=prompts, tokens_to_generate=n, top_k=1, **extra))


def leave_mid_stream(log, attempts=5):
    """Streams 4 choices of 47 tokens and leaves after the first event: the request's log line
    must say that the client left with fewer tokens drawn, and a greedy request after it must
    answer as before (with tensor parallelism the ranks stopped at the same step). Tried up to
    `attempts` times: the server may draw them all before it sees the connection close."""
    body = dict(prompt=PROMPTS[0], max_tokens=10, temperature=0)
    status, before = complete(body)
    drawn = []
    for _ in range(attempts):
        seen = open(log).read().count("max_tokens 47 (streamed")
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        conn.request("POST", "/v1/completions", body=json.dumps(dict(prompt="x", n=4, max_tokens=47, stream=True)))
        first = conn.getresponse().readline()
        conn.close()
        for _ in range(600):  # its log line comes once the request ends
            lines = [l for l in open(log).read().splitlines() if "max_tokens 47 (streamed" in l]
            if len(lines) > seen:
                break
            time.sleep(0.1)
        cut = [int(w) for w in lines[-1].split("the client left: ")[1:2] for w in w.split()[:1]] if lines else []
        drawn.append(cut[0] if cut else None)
        if first.startswith(b"data: ") and cut and cut[0] < 4 * 47:
            break
    status2, after = complete(body)
    check(status == status2 == 200 and after["choices"] == before["choices"] and drawn[-1] is not None and
          drawn[-1] < 4 * 47, f"clients gone mid-stream: tokens drawn for them {drawn} of 188, then the next request "
          "answered as before")


if sys.argv[2] == "--leave":
    leave_mid_stream(sys.argv[3])
    sys.exit(1 if fails else 0)
if sys.argv[2] == "--dump":
    batched = behind_a_slow_request([lm_eval_body(p) for p in LM_EVAL_PROMPTS])
    out = {"concurrent": {"choices": [r[1]["choices"][0] for r in batched]},
           "greedy": greedy(PROMPTS, logprobs=True)[1],
           "beam": put(dict(prompts=PROMPTS[:1], tokens_to_generate=6, beam_width=3))[1],
           "sampled": put(dict(prompts=PROMPTS, tokens_to_generate=8, top_p=0.9, random_seed=5))[1],
           "completions": complete(dict(prompt=PROMPTS, max_tokens=4, temperature=0, logprobs=2, echo=True))[1],
           "streamed": joined(streamed(dict(prompt=PROMPTS, n=2, max_tokens=6, temperature=1.0, seed=3))[1])}
    json.dump(out, open(sys.argv[3], "w"))
    sys.exit(0)

reference = [json.loads(line) for line in open(sys.argv[2])]
EOD = "<|endoftext|>"

# Greedy (Megatron's top_k 1) against trident-generate --greedy: the same tokens, the
# prompt in front, <|endoftext|> kept where generation ended at it.
singles = []
for p, ref in zip(PROMPTS, reference):
    status, r = greedy([p])
    singles.append(r)
    ok = status == 200 and r["text"][0] in (p + ref["text"], p + ref["text"] + EOD)
    check(ok, f"greedy {p!r}: the same text as trident-generate ({r['text'][0][len(p):]!r})" if ok else
          f"greedy {p!r}: {status} {r} vs {ref}")
    check(r["logprobs"] is None and "".join(r["segments"][0]) == r["text"][0],
          "no logprobs unless asked; the segments make up the text")

# Both prompts in one request (different lengths): each as when alone.
status, both = greedy(PROMPTS)
check(status == 200 and both["text"] == [s["text"][0] for s in singles],
      "two prompts of different lengths together: each as alone")

# Scoring (tokens_to_generate 0) gives the logprobs the generation gave, token by token: for
# the prompt always, for the whole text when it tokenizes back to the tokens generated.
status, gen = greedy(PROMPTS[:1], logprobs=True)
lp_gen = gen["logprobs"][0] if status == 200 else []
check(status == 200 and len(lp_gen) == len(gen["segments"][0]) - 1 and all(x <= 0 for x in lp_gen),
      f"logprobs: one per token after the first ({len(lp_gen)}), all <= 0")
for texts, what in [(PROMPTS[:1], "the prompt"), (gen["text"], "the generated text")]:
    status, scored = put(dict(prompts=texts, tokens_to_generate=0, logprobs=True))
    if status != 200 or scored["text"] != texts:
        check(False, f"scoring {what}: {status} {scored}")
        continue
    n = len(scored["segments"][0])
    if scored["segments"][0] != gen["segments"][0][:n]:
        print(f"skip: {what} tokenizes to other tokens than those generated")
        continue
    worst = max(abs(a - b) for a, b in zip(lp_gen[:n - 1], scored["logprobs"][0]))
    check(len(scored["logprobs"][0]) == n - 1 and worst < 1e-4,
          f"scoring {what} ({n} tokens) gives the generation's logprobs (worst difference {worst:.2g})")

# Seeds: the same random_seed repeats, another differs.
sample = lambda seed: put(dict(prompts=PROMPTS, tokens_to_generate=16, temperature=1.0, random_seed=seed))[1]["text"]
a, b, c = sample(5), sample(5), sample(6)
check(a == b, "random_seed 5 twice: the same text")
check(a != c, "random_seed 6 differs")

# Several clients at once are answered one at a time, each as alone.
results = [None] * 4
def client(i):
    results[i] = greedy([PROMPTS[i % 2]])
threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
check(all(s == 200 and r["text"] == singles[i % 2]["text"] for i, (s, r) in enumerate(results)),
      "four concurrent requests: each answered as alone")

# stop_on_eol: no "\n" or "\n\n" token generated before the last.
status, r = put(dict(prompts=["Lines:\n"], tokens_to_generate=30, stop_on_eol=True, random_seed=1, temperature=2.0))
generated = r["segments"][0][len(put(dict(prompts=["Lines:\n"], tokens_to_generate=0, logprobs=True))[1]["segments"][0]):]
check(status == 200 and not any(t in ("\n", "\n\n") for t in generated[:-1]), f"stop_on_eol: {generated}")

# Beam search: at most beam_width hypotheses, best first, each the prompt continued.
status, r = put(dict(prompts=PROMPTS[:1], tokens_to_generate=6, beam_width=3))
check(status == 200 and 1 <= len(r["text"]) <= 3 and r["scores"] == sorted(r["scores"], reverse=True) and
      all(t.startswith(PROMPTS[0]) for t in r["text"]), f"beam search: {len(r.get('text', []))} hypotheses")

# Beam search stops at the learned positions (Megatron's) rather than refusing the request.
status, r = put(dict(prompts=PROMPTS[:1], tokens_to_generate=100, beam_width=2))
check(status == 200 and all(len(seg) <= 48 for seg in r["segments"]),
      f"beam search asked past the 48 positions: {status}, {[len(seg) for seg in r.get('segments', [])]} tokens")

# The OpenAI-style /completions: greedy (temperature 0) continues as /api's top_k 1 does,
# without the prompt and without <|endoftext|>.
api_text = singles[0]["text"][0]
status, r = complete(dict(prompt=PROMPTS[0], max_tokens=10, temperature=0))
want = api_text[len(PROMPTS[0]):].split(EOD)[0]
want_greedy_text = want
check(status == 200 and r["choices"][0]["text"] == want and r["object"] == "text_completion" and
      r["choices"][0]["finish_reason"] == ("stop" if api_text.endswith(EOD) else "length"),
      f"/v1/completions greedy: /api's continuation ({r['choices'][0]['text']!r})" if status == 200 else f"{status} {r}")
# A stop string cuts the text before it; finish_reason "stop"; echo puts the prompt in front.
words = want.split(" ")
if len(words) < 3 or not words[2]:
    print(f"skip: no third word in {want!r} to stop at")
else:
    stop = " " + words[2]
    status, r = complete(dict(prompt=[PROMPTS[0]], max_tokens=10, temperature=0, stop=[stop], echo=True))
    c = r["choices"][0] if status == 200 else {}
    check(c.get("text") == PROMPTS[0] + want[:want.index(stop)] and c.get("finish_reason") == "stop",
          f"stop {stop!r}: {c.get('text')!r}, {c.get('finish_reason')}")
# lm-evaluation-harness's loglikelihood request (max_tokens 1, logprobs 1, echo) for a
# context and continuation, read as its parse_logprobs reads it: the continuation's summed
# log-probabilities equal /api's scoring of the same text, and is_greedy agrees with /api's
# greedy continuation of the context.
context = PROMPTS[1]
ctx_segments = lambda text: put(dict(prompts=[text], tokens_to_generate=0, logprobs=True))[1]["segments"][0]
greedy_pieces = singles[1]["segments"][0][len(ctx_segments(context)):]
for continuation in ["".join(greedy_pieces[:5]), api_text[len(PROMPTS[0]):][:12]]:
    status, ctx = put(dict(prompts=[context], tokens_to_generate=0, logprobs=True))
    status2, whole = put(dict(prompts=[context + continuation], tokens_to_generate=0, logprobs=True))
    ctxlen = len(ctx["segments"][0])
    status3, lm = complete(dict(model="gpt2", prompt=[context + continuation], temperature=0, max_tokens=1, logprobs=1,
                                seed=1234, echo=True))
    if status == status2 == status3 == 200 and whole["segments"][0][:ctxlen] == ctx["segments"][0]:
        lp = lm["choices"][0]["logprobs"]
        n = len(whole["segments"][0])
        logprob = sum(lp["token_logprobs"][ctxlen:-1])
        is_greedy = all(t == max(top.values()) for t, top in zip(lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1]))
        want = sum(whole["logprobs"][0][ctxlen - 1:])
        status, g = put(dict(prompts=[context], tokens_to_generate=n - ctxlen, top_k=1))
        want_greedy = g["segments"][0][ctxlen:] == whole["segments"][0][ctxlen:]
        check(len(lp["token_logprobs"]) == n + 1 and lp["token_logprobs"][0] is None and abs(logprob - want) < 1e-6 and
              is_greedy == want_greedy and lm["usage"]["prompt_tokens"] == n and lm["usage"]["completion_tokens"] == 1,
              f"lm-eval's loglikelihood of {continuation!r}: {logprob:.4f} (/api: {want:.4f}), is_greedy {is_greedy}")
    else:
        check(False, f"lm-eval's request: {status} {status2} {status3}, or the context tokenizes apart")
# lm-eval's requests from 8 clients at once: the server decodes the greedy ones waiting
# together; each answer is the one it gets alone (log-probabilities within 1e-4: a batch
# sums in another order).
t0 = time.time()
alone = [complete(lm_eval_body(p)) for p in LM_EVAL_PROMPTS]
t_alone = time.time() - t0
t0 = time.time()
together = concurrently([lm_eval_body(p) for p in LM_EVAL_PROMPTS])
t_together = time.time() - t0
together = behind_a_slow_request([lm_eval_body(p) for p in LM_EVAL_PROMPTS])  # surely batched
worst = 0.0
same = all(s1 == s2 == 200 for (s1, _), (s2, _) in zip(alone, together))
for (_, a), (_, b) in zip(alone, together):
    ca, cb = a["choices"][0], b["choices"][0]
    same = same and ca["text"] == cb["text"] and ca["logprobs"]["tokens"] == cb["logprobs"]["tokens"]
    worst = max([worst] + [abs(x - y) for x, y in zip(ca["logprobs"]["token_logprobs"][1:], cb["logprobs"]["token_logprobs"][1:])])
check(same and worst < 1e-4, f"8 concurrent lm-eval requests: each as alone (logprobs within {worst:.2g}); "
      f"{t_alone:.3f} s one by one, {t_together:.3f} s at once")

# OpenAI's model list: one model, "trident", as the answers name it; another id is a 404.
status, models = put(None, method="GET", raw=b"", path="/v1/models")
card = models["data"][0] if status == 200 and models.get("data") else {}
check(status == 200 and models["object"] == "list" and len(models["data"]) == 1 and card.get("id") == "trident" and
      card.get("object") == "model" and card.get("max_model_len", 0) > 0 and "iter_" in card.get("root", ""),
      f"GET /v1/models: {status} {models}")
status, one = put(None, method="GET", raw=b"", path="/v1/models/trident")
check(status == 200 and one == card, f"GET /v1/models/trident: {status} {one}")
status, other = put(None, method="GET", raw=b"", path="/v1/models/gpt-4")
check(status == 404 and isinstance(other, dict) and "does not exist" in other.get("message", ""),
      f"GET /v1/models/gpt-4: {status} {other}")
status, short = put(None, method="GET", raw=b"", path="/models")
check(status == 200 and short == models, f"GET /models is GET /v1/models: {status} {short}")

# Token-id prompts (lm-eval's default: GPT-2's ids of "Hello world") answer as the text does;
# /completions is /v1/completions.
status, by_ids = complete(dict(prompt=[[15496, 995]], max_tokens=5, temperature=0, echo=True), path="/completions")
status2, by_text = complete(dict(prompt="Hello world", max_tokens=5, temperature=0, echo=True))
check(status == 200 and status2 == 200 and by_ids["choices"] == by_text["choices"] and
      by_ids["choices"][0]["text"].startswith("Hello world"), "token-id prompts: as their text")
status, r = complete(dict(prompt=["Hello", "The"], n=2, best_of=3, max_tokens=3, seed=4))
check(status == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2, 3] and r["usage"]["completion_tokens"] >= 6,
      f"n 2, best_of 3: two choices a prompt: {status} {r}")
status, r = complete(dict(prompt="x", n=21))
check(status == 400 and r["message"] == "n must be an integer from 1 to 20", f"n 21: {status} {r}")
status, r = complete(dict(prompt="x", max_tokens=48))
check(status == 400 and r["message"].startswith("This model's maximum context length is 48 tokens"),
      f"past the context: {status} {r}")

# "stream": true: server-sent events whose chunks join to the unstreamed answer (greedy with
# echo, logprobs and two choices a prompt; sampled with a seed and a stop string), the usage
# last with include_usage, then [DONE].
for body in [dict(prompt=PROMPTS, n=2, max_tokens=8, temperature=0, echo=True, logprobs=2),
             dict(prompt=PROMPTS[0], max_tokens=12, temperature=1.0, seed=7, stop=[" the", "."])]:
    status, whole = complete(body)
    status2, events, content_type = streamed(dict(body, stream_options=dict(include_usage=True)))
    got = joined(events) if status2 == 200 else None
    check(status == status2 == 200 and content_type.startswith("text/event-stream") and got is not None and
          got["choices"] == whole["choices"] and got["usage"] == whole["usage"] and len(events) > len(whole["choices"]) + 2,
          f"stream {sorted(body)}: {len(events) if status2 == 200 else events} events join to the unstreamed answer")
status, r, _ = streamed(dict(prompt="x", n=1, best_of=2))
check(status == 400 and r["message"].startswith("best_of above n cannot be streamed"), f"stream with best_of: {status} {r}")
# More clients at once than cpp-httplib's default 8 threads: 20 streams, each answered whole.
results = [None] * 20
def stream_client(i):
    status, events, _ = streamed(dict(prompt=PROMPTS[i % 2], max_tokens=3, temperature=0))
    results[i] = joined(events) if status == 200 else None
threads = [threading.Thread(target=stream_client, args=(i,)) for i in range(20)]
[t.start() for t in threads]
[t.join() for t in threads]
texts = [r["choices"][0]["text"] if r else None for r in results]
check(all(t is not None and t == texts[i % 2] for i, t in enumerate(texts)), f"20 concurrent streams: {texts[:2]}")
# A client that leaves mid-stream: the server finishes that request and answers the next.
conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
conn.request("POST", "/v1/completions", body=json.dumps(dict(prompt="x", max_tokens=40, stream=True)))
first = conn.getresponse().readline()
conn.close()
status, r = complete(dict(prompt=PROMPTS[0], max_tokens=10, temperature=0))
check(first.startswith(b"data: ") and status == 200 and r["choices"][0]["text"] == want_greedy_text,
      "a client gone mid-stream: the next request is answered")

# Refusals: 400 with Megatron's message; POST is PUT; another method is not found.
for body, message in [({}, "prompts argument required"),
                      (dict(prompts=["x"], temperature=0), "temperature must be a positive number less than or equal to 100.0"),
                      (dict(prompts=["x"], tokens_to_generate=48), "Length of prompt + tokens_to_generate longer than allowed: 1 + 48 tokens, 48 at most"),
                      (dict(prompts=["x"] * 5, tokens_to_generate=40), "Too many tokens.  205 is greater than 200"),
                      (dict(prompts=["x"] * 4, tokens_to_generate=40), None)]:
    status, r = put(body)
    if message is None:
        check(status == 200, "4 x (1 + 40) tokens: past the training's 32, within the 48 learned positions and "
              "--max-tokens-to-oom 200")
    else:
        check(status == 400 and r == {"message": message}, f"400 {message!r}" if status == 400 else f"{status} {r}")
status, r = put(None, raw=b"{not json")
check(status == 400 and r["message"].startswith("the request body is not JSON"), "a body that is not JSON: 400")
# A body that is not UTF-8 (Latin-1's e-acute): 400, its bytes in the message replaced, and the
# server goes on.
for path in ["/api", "/v1/completions"]:
    status, r = put(None, method="POST", path=path, raw=b'{"prompts": ["caf\xe9"], "prompt": "caf\xe9", "max_tokens": 2}')
    check(status == 400 and r["message"].startswith("the request body is not JSON") and "\ufffd" in r["message"],
          f"a body that is not UTF-8 to {path}: {status} {r}")
status, r = put(dict(prompts=["x"], tokens_to_generate=2), method="POST")
check(status == 200 and len(r["text"]) == 1, "POST /api as PUT")
status, _ = put(None, method="GET", raw=b"")
check(status in (404, 405), f"GET /api: {status}")
with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/", timeout=30) as page:
    html = page.read().decode()
    check(page.status == 200 and page.headers["Content-Type"].startswith("text/html") and 'fetch("/api"' in html,
          "GET /: the page that PUTs to /api")
sys.exit(1 if fails else 0)
