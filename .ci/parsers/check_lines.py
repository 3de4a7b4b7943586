#!/usr/bin/env python
"""Check launch command lines against the REAL Megatron-LM and vLLM argument parsers.

Usage:
    venv/bin/python check_lines.py lines.json            # -> JSON list on stdout
    venv/bin/python check_lines.py --self-test           # runs selftest_lines.json

Input: JSON list of objects
    {"framework": "megatron"|"vllm",
     "line": "<full shell line>",
     "world_size": int,            # megatron; else derived from torchrun --nproc-per-node*--nnodes
     "gpu_arch": 9,                # optional (megatron): CUDA major arch assumed by validate_args
                                   #   (<10 => CUDA_DEVICE_MAX_CONNECTIONS=1 required with TP/CP>1)
     "te_version": "2.12.0",       # optional (megatron): Transformer Engine version assumed
     "env": {"K": "V"},            # optional extra environment
     "strict": false}              # megatron: also require what a real pretrain run needs
                                   #   (data source, train-iters/samples, buildable tokenizer)
Output: JSON list of {"ok": bool, "error": str, "warnings": [str]} (same order).

Shims (NOT stubs of the parsers; both parsers run unmodified):
  * Megatron-LM HEAD needs Python >= 3.12; on 3.11 `typing.override` is aliased to
    `typing_extensions.override` before import.
  * `flashinfer` is made un-importable (its CUDA-DSL import crashes without a GPU);
    megatron.core already handles ImportError for it.
  * megatron.training.arguments.get_device_arch_version and torch.cuda.get_device_capability
    are replaced by constants (gpu_arch), megatron.core.utils.get_te_version by te_version.
  * vLLM: current platform is forced to CpuPlatform so DeviceConfig can be built without a GPU.
"""

import contextlib
import io
import json
import os
import re
import shlex
import sys
import traceback
import typing
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
MEGATRON_DIR = os.environ.get("MEGATRON_DIR", os.path.join(HERE, "Megatron-LM"))

warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

# ---------------------------------------------------------------- shell line handling
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def split_line(line):
    """Return (env_dict, list of command segments (token lists))."""
    line = re.sub(r"\\\r?\n", " ", line)
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    toks = list(lex)
    segs, cur = [], []
    for t in toks:
        if t in (";", "&&", "||", "|", "&"):
            if cur:
                segs.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        segs.append(cur)
    env = {}
    out = []
    for seg in segs:
        i = 0
        if seg and seg[0] == "export":
            for t in seg[1:]:
                if ENV_RE.match(t):
                    k, v = t.split("=", 1)
                    env[k] = v
            continue
        if seg and seg[0] == "env":
            i = 1
        while i < len(seg) and ENV_RE.match(seg[i]):
            k, v = seg[i].split("=", 1)
            env[k] = v
            i += 1
        if i < len(seg):
            out.append(seg[i:])
    return env, out


@contextlib.contextmanager
def patched_env(env):
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _argparse_err(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if "error:" in ln:
            return " | ".join(x.strip() for x in lines[i : i + 6])
    return lines[-1] if lines else "SystemExit"


@contextlib.contextmanager
def quiet():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


# ---------------------------------------------------------------- Megatron
_MEG = {}


def load_megatron():
    if _MEG:
        return _MEG
    import typing_extensions

    if not hasattr(typing, "override"):
        typing.override = typing_extensions.override
    sys.modules.setdefault("flashinfer", None)
    if MEGATRON_DIR not in sys.path:
        sys.path.insert(0, MEGATRON_DIR)
    with quiet():
        import megatron.core.utils as cu
        import torch
        from megatron.training import arguments as A
    _MEG.update(A=A, cu=cu, torch=torch)
    return _MEG


SCRIPT_DEFAULTS = {  # args_defaults passed by the entry scripts (pretrain_*.py)
    "pretrain_gpt.py": {"tokenizer_type": "GPT2BPETokenizer"},
    "pretrain_hybrid.py": {"tokenizer_type": "GPT2BPETokenizer"},
    "pretrain_vlm.py": {"tokenizer_type": "GPT2BPETokenizer"},
}


def _launcher_world_size(pre):
    """Derive world size from torchrun args (tokens before the script)."""
    nproc, nnodes = None, 1
    it = iter(range(len(pre)))
    for i in it:
        t = pre[i]
        for names, setter in (
            (("--nproc-per-node", "--nproc_per_node"), "p"),
            (("--nnodes",), "n"),
        ):
            for nm in names:
                val = None
                if t == nm and i + 1 < len(pre):
                    val = pre[i + 1]
                elif t.startswith(nm + "="):
                    val = t.split("=", 1)[1]
                if val is not None:
                    try:
                        v = int(val.split(":")[-1])
                    except ValueError:
                        v = None
                    if setter == "p":
                        nproc = v
                    else:
                        nnodes = v or 1
    if nproc is None:
        return None
    return nproc * nnodes


def check_megatron(item):
    env, segs = split_line(item["line"])
    env.update(item.get("env") or {})
    seg = None
    for s in segs:
        if any(t.endswith(".py") for t in s):
            seg = s
    if seg is None:
        return False, "no *.py training script found in line", []
    idx = max(i for i, t in enumerate(seg) if t.endswith(".py"))
    script, pre, argv = os.path.basename(seg[idx]), seg[:idx], seg[idx + 1 :]
    ws = item.get("world_size") or _launcher_world_size(pre) or 1
    m = load_megatron()
    A, cu, torch = m["A"], m["cu"], m["torch"]
    arch = int(item.get("gpu_arch", 9))
    from packaging.version import Version

    cu._te_version = Version(item.get("te_version", "2.12.0"))
    cu.get_te_version = lambda: Version(item.get("te_version", "2.12.0"))
    A.get_device_arch_version = lambda: arch
    torch.cuda.get_device_capability = lambda *a, **k: (arch, 0)
    base_env = {k: v for k, v in os.environ.items()}
    # start from a clean launch env: only what the line sets
    for k in (
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "NVTE_CPU_OFFLOAD_V1",
        "NCCL_PROTO",
        "CUDA_GRAPHS_USE_NODE_PRIORITY",
        "PYTORCH_CUDA_ALLOC_CONF",
        "NCCL_GRAPH_REGISTER",
    ):
        base_env.pop(k, None)
    base_env.update(env)
    base_env["WORLD_SIZE"] = str(ws)
    base_env["RANK"] = "0"
    warns = []
    saved_argv = sys.argv
    saved_environ = dict(os.environ)
    os.environ.clear()
    os.environ.update(base_env)
    try:
        sys.argv = [script] + argv
        with quiet() as (out, err):
            try:
                args = A.parse_args()
            except SystemExit:
                return False, "argparse: " + _argparse_err(err.getvalue()), warns
            try:
                A.validate_args(args, dict(SCRIPT_DEFAULTS.get(script, {})))
            except SystemExit:
                return False, "validate_args called exit(): " + out.getvalue().strip()[-300:], warns
            except Exception as e:  # AssertionError, ValueError, RuntimeError ...
                tb = traceback.extract_tb(e.__traceback__)
                where = next(
                    (
                        f"{os.path.basename(f.filename)}:{f.lineno}"
                        for f in reversed(tb)
                        if f.filename.endswith("arguments.py")
                    ),
                    "",
                )
                return False, f"validate_args {type(e).__name__} at {where}: {e}".strip(), warns
        # ---- things a real pretrain run needs later (not validate_args)
        rt = []
        if not (args.train_iters or args.train_samples) and not args.skip_train:
            rt.append(
                "neither --train-iters nor --train-samples (training.py raises "
                "'either train-iters or train-samples should be provided.')"
            )
        if not (
            args.mock_data
            or args.data_path
            or args.train_data_path
            or args.data_args_path
            or args.per_split_data_args_path
        ):
            rt.append("no data source (--mock-data or --data-path ...)")
        tt = args.tokenizer_type
        if tt == "NullTokenizer":
            if not args.vocab_size:
                rt.append("NullTokenizer needs --vocab-size")
        elif tt in ("GPT2BPETokenizer",):
            if not (args.vocab_file and args.merge_file):
                rt.append(f"tokenizer {tt} needs --vocab-file and --merge-file")
        elif tt in (
            "HuggingFaceTokenizer",
            "SentencePieceTokenizer",
            "GPTSentencePieceTokenizer",
            "Llama2Tokenizer",
            "TikTokenizer",
        ):
            if not args.tokenizer_model:
                rt.append(f"tokenizer {tt} needs --tokenizer-model")
        if args.lr is None:
            rt.append("--lr not set (optimizer is then built with lr=None)")
        warns += rt
        if item.get("strict") and rt:
            return False, "runtime requirements: " + "; ".join(rt), warns
        return True, "", warns
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environ)


# ---------------------------------------------------------------- vLLM
_VL = {}


def load_vllm():
    if _VL:
        return _VL
    with quiet():
        from vllm import platforms
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
        import vllm.entrypoints.cli.serve as S
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    _VL.update(S=S, AEA=AsyncEngineArgs, FAP=FlexibleArgumentParser, make=make_arg_parser)
    return _VL


def build_vllm_serve_parser():
    v = load_vllm()
    p = v["FAP"](description="vLLM CLI")
    sub = p.add_subparsers(required=False, dest="subparser")
    cmd = v["S"].ServeSubcommand()
    sp = cmd.subparser_init(sub)
    sp.set_defaults(dispatch_function=cmd.cmd)
    return p, sp, cmd


def check_vllm(item):
    env, segs = split_line(item["line"])
    env.update(item.get("env") or {})
    argv = None
    legacy = False
    for s in segs:
        for i, t in enumerate(s):
            if os.path.basename(t) == "vllm" and i + 1 < len(s) and s[i + 1] == "serve":
                argv = s[i + 1 :]
            if t == "-m" and i + 1 < len(s) and s[i + 1] == "vllm.entrypoints.openai.api_server":
                argv, legacy = s[i + 2 :], True
    if argv is None:
        return False, "no `vllm serve` (or -m vllm.entrypoints.openai.api_server) found", []
    v = load_vllm()
    warns = []
    with patched_env(env), quiet() as (out, err):
        p, sp, cmd = build_vllm_serve_parser()
        try:
            if legacy:
                lp = v["make"](v["FAP"]())
                args = lp.parse_args(argv)
            else:
                args = p.parse_args(argv)
        except SystemExit:
            return False, "argparse: " + _argparse_err(err.getvalue()), warns
        except Exception as e:
            return False, f"argparse {type(e).__name__}: {e}", warns
        try:
            if not legacy:
                cmd.validate(args)
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag
            ea = v["AEA"].from_cli_args(args)
        except Exception as e:
            return False, f"{type(e).__name__}: {e}", warns
        # cheap extra validators (no hardware / no HF download). These mirror checks that
        # vLLM itself runs later in create_engine_config / ModelConfig / engine start-up.
        errs = vllm_extra_validate(ea, warns)
        if errs:
            return False, "; ".join(errs), warns
    return True, "", warns


def _flat_literal(tp):
    out = []
    for a in typing.get_args(tp):
        if isinstance(a, str):
            out.append(a)
        else:
            out += _flat_literal(a)
    return out


def vllm_extra_validate(ea, warns):
    errs = []
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    if ea.quantization is not None and ea.quantization not in QUANTIZATION_METHODS:
        errs.append(f"--quantization {ea.quantization!r} not in QUANTIZATION_METHODS")
    try:
        from vllm.config import CacheConfig

        CacheConfig(cache_dtype=ea.kv_cache_dtype)
    except Exception as e:
        errs.append(
            f"CacheConfig: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            + (
                f" {[ln for ln in str(e).splitlines() if 'Invalid' in ln][:1]}"
                if "Invalid" in str(e)
                else ""
            )
        )
    kvt = ea.kv_transfer_config
    if kvt is not None and getattr(kvt, "kv_connector", None):
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

        reg = getattr(KVConnectorFactory, "_registry", {})
        if reg and kvt.kv_connector not in reg and not kvt.kv_connector_module_path:
            errs.append(f"kv_connector {kvt.kv_connector!r} not registered; known: {sorted(reg)}")
    sc = ea.speculative_config
    if isinstance(sc, dict):
        import dataclasses

        from vllm.config import speculative as S

        fields = {f.name for f in dataclasses.fields(S.SpeculativeConfig)}
        unk = sorted(set(sc) - fields)
        if unk:
            errs.append(f"speculative_config unknown keys {unk}")
        meth = sc.get("method")
        if meth is not None and meth not in _flat_literal(S.SpeculativeMethod):
            errs.append(f"speculative_config method {meth!r} not in SpeculativeMethod")
        n = sc.get("num_speculative_tokens")
        if n is not None and (not isinstance(n, int) or n <= 0):
            errs.append("num_speculative_tokens must be int > 0")
    try:
        from vllm.config import ParallelConfig

        ParallelConfig(
            tensor_parallel_size=ea.tensor_parallel_size,
            pipeline_parallel_size=ea.pipeline_parallel_size,
            data_parallel_size=ea.data_parallel_size,
            enable_expert_parallel=ea.enable_expert_parallel,
        )
    except Exception as e:
        warns.append(f"ParallelConfig(...) raised on CPU: {type(e).__name__}: {str(e)[:200]}")
    return errs


def check_item(item):
    fw = item.get("framework")
    try:
        if fw == "megatron":
            ok, err, w = check_megatron(item)
        elif fw == "vllm":
            ok, err, w = check_vllm(item)
        else:
            ok, err, w = False, f"unsupported framework {fw!r}", []
    except Exception as e:
        ok, err, w = False, f"checker crashed: {type(e).__name__}: {e}", []
    return {"ok": ok, "error": err, "warnings": w}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        path = os.path.join(HERE, "selftest_lines.json")
        items = json.load(open(path))
        res = [check_item(it) for it in items]
        bad = 0
        for it, r in zip(items, res, strict=False):
            exp = it.get("expect_ok")
            mark = "PASS" if exp is None or exp == r["ok"] else "UNEXPECTED"
            bad += mark != "PASS"
            print(
                f"[{mark}] {it.get('name', '')}: ok={r['ok']} {r['error'][:200]}", file=sys.stderr
            )
        print(json.dumps(res, indent=1))
        sys.exit(1 if bad else 0)
    data = (
        json.load(open(sys.argv[1]))
        if len(sys.argv) > 1 and sys.argv[1] != "-"
        else json.load(sys.stdin)
    )
    print(json.dumps([check_item(it) for it in data], indent=1))


if __name__ == "__main__":
    main()
