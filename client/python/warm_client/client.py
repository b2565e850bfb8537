"""The client: one gRPC channel over the daemon's Unix socket, methods named after the
warm.v1.Warm RPCs, errors as WarmError with a message a person can act on."""

import errno
import grp
import json as _json
import os
import queue
import socket as _socket
import sys
import time

import grpc

try:
    from warm.v1 import warm_pb2 as pb
    from warm.v1 import warm_pb2_grpc as pbg
except ImportError:  # the stubs live in the build tree: $WARM_PYTHON names it
    _stubs = os.environ.get("WARM_PYTHON")
    if not _stubs:
        raise ImportError("warm_client needs the generated stubs warm/v1/warm_pb2.py: "
                          "install python3-warm, or build warmd (proto/ generates "
                          "build/python) and set WARM_PYTHON to that directory") from None
    sys.path.insert(0, _stubs)
    from warm.v1 import warm_pb2 as pb  # noqa: E402
    from warm.v1 import warm_pb2_grpc as pbg  # noqa: E402

DEFAULT_SOCKET = "/run/warmd.sock"
MAX_MESSAGE_BYTES = 64 << 20
# gRPC waits 1 s, then longer, before it connects again after a failed connect: a call
# that waits for the daemon's full listen backlog to drain (Client._wait_connected) tries
# again after 20 ms, then at most every 250 ms.
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.initial_reconnect_backoff_ms", 20),
                    ("grpc.max_reconnect_backoff_ms", 250)]
# json_schema for JSON mode (Ollama's format "json", OpenAI's json_object): any object.
JSON_OBJECT = {"type": "object"}
_CACHE_MODES = {"use": pb.CACHE_MODE_USE, "skip": pb.CACHE_MODE_SKIP,
                "refresh": pb.CACHE_MODE_REFRESH}


class WarmError(Exception):
    """A failed call: code is a grpc.StatusCode, or the string "NOT_RUNNING" /
    "SOCKET_ACCESS" when the socket cannot be reached."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _connect_errno(path):
    """0 when a connect to path succeeds now, else its errno. EAGAIN: something listens
    there, but its listen backlog is full (a Unix socket refuses to queue more); the
    connect does not wait for room."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
        return 0
    except OSError as e:
        return e.errno
    finally:
        s.close()


def _probe(path):
    """None when something listens on path, else a WarmError saying what to do."""
    e = _connect_errno(path)
    if e in (0, errno.EAGAIN):
        return None
    if e in (errno.ENOENT, errno.ENOTDIR):
        return WarmError("NOT_RUNNING", f"warmd is not running: no socket at {path}; start it "
                         "with 'sudo systemctl start warmd.socket' (or run 'warmd')")
    if e == errno.ECONNREFUSED:
        return WarmError("NOT_RUNNING", f"warmd is not running: nothing listens on {path}")
    if e in (errno.EACCES, errno.EPERM):
        try:
            group = grp.getgrgid(os.stat(path).st_gid).gr_name
        except (OSError, KeyError):
            group = "warm"
        return WarmError("SOCKET_ACCESS", f"permission denied on {path}: join the group "
                         f"'{group}' ('sudo usermod -aG {group} $USER', then log in again)")
    return WarmError("NOT_RUNNING", f"cannot connect to {path}: {os.strerror(e)}")


class Stream:
    """The events of a Generate or Chat call. Iterating yields the text pieces as they
    arrive (a chat's answer); `tokens` collects (id, text) pairs, `reasoning` the reasoning
    of a thinking model (apart from the answer), `summary` is set at the end (a
    warm.v1.Summary message) and `tool_calls` then holds the answer's tool calls as dicts
    {"id", "name", "arguments"} (arguments parsed from its JSON); `tool_call_pieces` the
    calls as they streamed, (index, id, name, arguments piece) tuples (id and name in a
    call's first piece only). cancel() stops the stream."""

    def __init__(self, client, call):
        self._client = client
        self._call = call
        self.tokens = []
        self.reasoning = ""
        self.summary = None
        self.tool_call_pieces = []

    @property
    def tool_calls(self):
        if self.summary is None:
            return []
        return [{"id": c.id, "name": c.name, "arguments": _json.loads(c.arguments or "{}")}
                for c in self.summary.tool_calls]

    def __iter__(self):
        try:
            for ev in self._call:
                if ev.HasField("token") and ev.token.HasField("tool_call"):
                    t = ev.token.tool_call
                    self.tool_call_pieces.append((t.index, t.id, t.name, t.arguments))
                elif ev.HasField("token"):
                    self.tokens.append((ev.token.id, ev.token.text))
                    self.reasoning += ev.token.reasoning
                    yield ev.token.text
                elif ev.HasField("summary"):
                    self.summary = ev.summary
        except grpc.RpcError as e:
            raise self._client._error(e) from None

    def text(self):
        """Runs the stream to its end; returns the whole text."""
        return "".join(self)

    def cancel(self):
        self._call.cancel()


class Client:
    def __init__(self, socket=None, timeout=600.0):
        self.socket = socket or os.environ.get("WARM_SOCKET") or DEFAULT_SOCKET
        err = _probe(self.socket)
        if err:
            raise err
        self.timeout = timeout
        self._channel = grpc.insecure_channel("unix:" + self.socket, options=_CHANNEL_OPTIONS)
        self._stub = pbg.WarmStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _error(self, e):
        if e.code() == grpc.StatusCode.UNAVAILABLE:
            probe = _probe(self.socket)
            if probe:
                return probe
        return WarmError(e.code(), e.details() or e.code().name)

    def _wait_connected(self, deadline):
        """After a call failed UNAVAILABLE: when the daemon's listen backlog is full (a
        connect fails with EAGAIN, as gRPC's did: the daemon is busy refusing a flood of
        connections), waits until the channel is connected, gRPC connecting again after
        its backoff. True when it is, before deadline (time.monotonic(); None = none);
        False at once for any other failure, or when the daemon went away meanwhile."""
        if _connect_errno(self.socket) != errno.EAGAIN:
            return False
        states = queue.Queue()
        put = states.put
        self._channel.subscribe(put, try_to_connect=True)
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                try:
                    state = states.get(timeout=left)
                except queue.Empty:
                    return False
                if state == grpc.ChannelConnectivity.READY:
                    return True
                if (state == grpc.ChannelConnectivity.TRANSIENT_FAILURE and
                        _connect_errno(self.socket) not in (0, errno.EAGAIN)):
                    return False
        finally:
            self._channel.unsubscribe(put)

    def _unary(self, method, request):
        """One unary call within self.timeout; a call that failed because the daemon's
        listen backlog was full is made once more when the channel has connected."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        for again in (True, False):
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                return getattr(self._stub, method)(request, timeout=left)
            except grpc.RpcError as e:
                if not (again and e.code() == grpc.StatusCode.UNAVAILABLE and
                        self._wait_connected(deadline)):
                    raise self._error(e) from None

    # ---- info, models, tokens -----------------------------------------------------------

    def info(self):
        return self._unary("GetInfo", pb.GetInfoRequest())

    def metrics(self):
        return self._unary("Metrics", pb.MetricsRequest()).text

    def models(self):
        return list(self._unary("ListModels", pb.ListModelsRequest()).models)

    def load(self, model, keep_alive_s=0):
        return self._unary("LoadModel", pb.LoadModelRequest(
            model=model, keep_alive_usec=int(keep_alive_s * 1e6)))

    def unload(self, model):
        return self._unary("UnloadModel", pb.UnloadModelRequest(model=model)).was_loaded

    def tokenize(self, model, text, add_special=False, parse_special=False):
        return list(self._unary("Tokenize", pb.TokenizeRequest(
            model=model, text=text, add_special=add_special, parse_special=parse_special)).tokens)

    def detokenize(self, model, tokens, skip_special=False):
        return self._unary("Detokenize", pb.DetokenizeRequest(
            model=model, tokens=tokens, skip_special=skip_special)).text

    # ---- embeddings ---------------------------------------------------------------------

    def embed(self, model, inputs, truncate=False, normalize=True, dimensions=0,
              keep_alive=None, unload_after=False, response=False):
        """Embeddings of inputs with an embedding model: a string, a list of strings, a
        list of token ids or a list of such lists. Returns one list of floats per input
        (L2-normalized unless normalize=False; the first `dimensions` values, renormalized,
        when dimensions > 0), or the whole EmbedResponse with response=True (prompt_tokens,
        cached_inputs, load_usec, ...). keep_alive: seconds (float)."""
        if isinstance(inputs, str):
            inputs = [inputs]
        inputs = list(inputs)
        req = pb.EmbedRequest(model=model or "", truncate=truncate, raw=not normalize,
                              dimensions=dimensions, unload_after=unload_after)
        if keep_alive is not None:
            req.keep_alive_usec = int(keep_alive * 1e6)
        if inputs and all(isinstance(x, int) for x in inputs):
            inputs = [inputs]
        for x in inputs:
            if isinstance(x, str):
                req.inputs.append(x)
            else:
                req.token_inputs.add(tokens=list(x))
        r = self._unary("Embed", req)
        if response:
            return r
        return [list(v.values) for v in r.embeddings]

    # ---- generation ---------------------------------------------------------------------

    @staticmethod
    def _format(json_schema, grammar):
        """OutputFormat from a schema (JSON text, or a dict / bool to serialize) or grammar
        text; None when neither is given."""
        if json_schema is not None and grammar is not None:
            raise ValueError("json_schema and grammar: give at most one")
        if json_schema is not None:
            if not isinstance(json_schema, str):
                json_schema = _json.dumps(json_schema)
            return pb.OutputFormat(json_schema=json_schema)
        if grammar is not None:
            return pb.OutputFormat(grammar=grammar)
        return None

    @staticmethod
    def _common(max_tokens, temperature, seed, top_k, top_p, stop, cache, namespace,
                keep_alive_s, json_schema=None, grammar=None):
        kw = dict(max_tokens=max_tokens, stop=list(stop),
                  cache=pb.CacheOptions(mode=_CACHE_MODES[cache], namespace=namespace),
                  keep_alive_usec=int(keep_alive_s * 1e6))
        fmt = Client._format(json_schema, grammar)
        if fmt is not None:
            kw["format"] = fmt
        if temperature is not None or seed or top_k is not None or top_p is not None:
            kw["sampling"] = pb.Sampling(
                temperature=0.8 if temperature is None else temperature,
                top_k=40 if top_k is None else top_k, top_p=0.95 if top_p is None else top_p,
                min_p=0.05, repeat_penalty=1.0, seed=seed)
        return kw

    def generate(self, model, prompt=None, tokens=None, max_tokens=0, temperature=None,
                 seed=0, top_k=None, top_p=None, stop=(), cache="use", namespace="",
                 keep_alive_s=0, json_schema=None, grammar=None):
        """Streams a completion of prompt (text) or tokens (ids). Any sampling argument
        sends sampling parameters (the daemon's defaults for the others). json_schema (a
        JSON Schema as text or as a dict; JSON_OBJECT is JSON mode) or grammar (warmd's
        GBNF-like text) constrains the output: a schema the daemon cannot compile is
        WarmError INVALID_ARGUMENT naming the keyword."""
        req = pb.GenerateRequest(model=model, prompt=prompt or "", tokens=tokens or [],
                                 **self._common(max_tokens, temperature, seed, top_k, top_p,
                                                stop, cache, namespace, keep_alive_s,
                                                json_schema, grammar))
        return Stream(self, self._stub.Generate(req))

    @staticmethod
    def _message(m):
        """A ChatMessage from (role, content) or a dict: role, content, and OpenAI's
        tool_calls ([{"id", "function": {"name", "arguments"}}] or [{"id", "name",
        "arguments"}], arguments as a dict or JSON text), tool_call_id, name,
        reasoning (or reasoning_content)."""
        if not isinstance(m, dict):
            return pb.ChatMessage(role=m[0], content=m[1])
        calls = []
        for c in m.get("tool_calls") or []:
            f = c.get("function", c)
            args = f.get("arguments", {})
            calls.append(pb.ToolCall(id=c.get("id", ""), name=f["name"],
                                     arguments=args if isinstance(args, str)
                                     else _json.dumps(args)))
        return pb.ChatMessage(role=m["role"], content=m.get("content") or "", tool_calls=calls,
                              tool_call_id=m.get("tool_call_id", ""), name=m.get("name", ""),
                              reasoning=m.get("reasoning", m.get("reasoning_content")) or "")

    _TOOL_CHOICES = {"auto": pb.TOOL_CHOICE_AUTO, "none": pb.TOOL_CHOICE_NONE,
                     "required": pb.TOOL_CHOICE_REQUIRED}
    _THINK = {None: pb.THINK_DEFAULT, True: pb.THINK_ON, False: pb.THINK_OFF,
              "low": pb.THINK_LOW, "medium": pb.THINK_MEDIUM, "high": pb.THINK_HIGH}

    def chat(self, model, messages, max_tokens=0, temperature=None, seed=0, top_k=None,
             top_p=None, stop=(), cache="use", namespace="", keep_alive_s=0,
             continue_last=False, json_schema=None, grammar=None, tools=None,
             tool_choice="auto", parallel_tool_calls=True, think=None):
        """messages: [(role, content), ...] or dicts (see _message: tool calls, tool
        results, reasoning); json_schema and grammar as in generate (they constrain the
        reply). tools: OpenAI-shaped tools (a list, or its JSON text); tool_choice "auto",
        "none", "required" or a function's name (the call is then forced with a grammar of
        its parameters); parallel_tool_calls False: at most one call. The calls come in
        Stream.tool_calls. think: None (the model's default), True or False (thinking
        models: qwen3, qwen35, gpt-oss; True for another is WarmError INVALID_ARGUMENT), or
        "low", "medium", "high" (gpt-oss's effort; True for the other thinking models); the
        reasoning comes in Stream.reasoning."""
        msgs = [self._message(m) for m in messages]
        kw = self._common(max_tokens, temperature, seed, top_k, top_p, stop, cache, namespace,
                          keep_alive_s, json_schema, grammar)
        if tools is not None:
            kw["tools_json"] = tools if isinstance(tools, str) else _json.dumps(tools)
        if tool_choice in self._TOOL_CHOICES:
            kw["tool_choice"] = self._TOOL_CHOICES[tool_choice]
        else:
            kw["tool_choice"] = pb.TOOL_CHOICE_FUNCTION
            kw["tool_choice_name"] = tool_choice
        kw["max_tool_calls"] = 0 if parallel_tool_calls else 1
        kw["think"] = self._THINK[think]
        req = pb.ChatRequest(model=model, messages=msgs, continue_last=continue_last, **kw)
        return Stream(self, self._stub.Chat(req))

    # ---- prompt cache -------------------------------------------------------------------

    def cache_stats(self, namespace=""):
        return self._unary("CacheStats", pb.CacheStatsRequest(namespace=namespace))

    def cache_list(self, namespace="", model="", limit=0):
        return list(self._unary("CacheList", pb.CacheListRequest(
            namespace=namespace, model=model, limit=limit)).entries)

    def cache_purge(self, namespace="", model=""):
        return self._unary("CachePurge", pb.CachePurgeRequest(namespace=namespace, model=model))
