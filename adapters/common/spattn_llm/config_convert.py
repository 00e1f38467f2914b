"""Per-head sparse-attention configs of LLM servers -> index-service configs, per TP rank.

Sources:
* MInference's per-head JSON: a list with one object per layer, {"<head>": [pattern,
  vertical_size, slash_size, score]}, pattern one of vertical_and_slash, stream_llm, block_sparse
  (and dense). Mapping (the same as `spattnctl index configs import --format=minference`):
  vertical_and_slash -> vertical_slash(vertical_size, slash_size); stream_llm -> a_shape
  (sink_tokens = vertical_size, local_tokens = slash_size); block_sparse -> block_sparse(top_k =
  vertical_size); dense -> dense; score -> search_score.
* vLLM's / SGLang's `dual_chunk_attention_config` (Qwen2.5-1M style; in the HF config.json):
  its `sparse_attention_config` is that same per-layer list (inline, or a JSON file name next to
  config.json); `sparse_attention_enabled: false` yields no head configs, and
  `sparse_attention_threshold` (the prompt length below which those servers stay dense) is
  reported as the worker flag `--dense_below_tokens`.

Tensor parallelism: rank r of tp serves query heads [r*H/tp, (r+1)*H/tp) and KV heads
[r*KV/tp, ...) (one replicated KV head per rank when KV < tp). Each rank gets its own model in the
index service, `rank_model_id(model, tp, r)` ("<model>.tp<tp>.r<r>"), with heads renumbered from 0,
so a rank's request (its local heads) matches its model. The adapters compute the same id.

Output: per rank, the Model (JSON of spattn.v1.Model) and the head configs in spattnctl's
`configs import` format (JSON of GetHeadConfigsResponse), or published through IndexService.
"""
import argparse
import json
import os
import sys

_MINFERENCE = {
    "vertical_and_slash": lambda v, s: {"method": "vertical_slash", "vertical_size": v,
                                        "slash_size": s},
    "stream_llm": lambda v, s: {"method": "a_shape", "sink_tokens": v, "local_tokens": s},
    "block_sparse": lambda v, s: {"method": "block_sparse", "top_k": v},
    "dense": lambda v, s: {"method": "dense"},
}
_PARAMS_KEY = {"a_shape": "a_shape", "vertical_slash": "vertical_slash",
               "block_sparse": "block_sparse", "flex_prefill": "flex_prefill",
               "sample_attention": "sample_attention", "anchor": "anchor", "saap": "saap",
               "sampled_lines": "sampled_lines"}


class ConfigError(ValueError):
    pass


def from_minference(data):
    """MInference JSON (list of per-layer {head: [pattern, v, s, score]}) -> head configs
    [{"layer", "head", "method": {...}, "score"}] with global head numbers."""
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, list):
        raise ConfigError("MInference config: expected a list with one object per layer")
    out = []
    for layer, heads in enumerate(data):
        if not isinstance(heads, dict):
            raise ConfigError(f"layer {layer}: expected an object {{head: [pattern, v, s, score]}}")
        for h, spec in sorted(heads.items(), key=lambda kv: int(kv[0])):
            where = f"layer {layer} head {h}"
            if not isinstance(spec, (list, tuple)) or len(spec) < 3:
                raise ConfigError(f"{where}: expected [pattern, vertical_size, slash_size, score]")
            pattern = spec[0]
            if pattern not in _MINFERENCE:
                raise ConfigError(f"{where}: unknown pattern {pattern!r} "
                                  f"(expected one of {sorted(_MINFERENCE)})")
            v, s = int(spec[1]), int(spec[2])
            if v < 0 or s < 0:
                raise ConfigError(f"{where}: sizes must be >= 0, got {v}, {s}")
            out.append({"layer": layer, "head": int(h), "method": _MINFERENCE[pattern](v, s),
                        "score": float(spec[3]) if len(spec) > 3 else 0.0})
    return out


def from_dual_chunk_config(cfg, base_dir=None):
    """dual_chunk_attention_config (or a whole HF config holding it) -> (head configs,
    worker_flags). A string sparse_attention_config names a JSON file under base_dir."""
    if "dual_chunk_attention_config" in cfg:
        cfg = cfg["dual_chunk_attention_config"]
    flags = {}
    if cfg.get("sparse_attention_threshold"):
        flags["dense_below_tokens"] = int(cfg["sparse_attention_threshold"])
    if cfg.get("sparse_attention_enabled") is False:
        return [], flags
    sac = cfg.get("sparse_attention_config")
    if sac is None:
        raise ConfigError("dual_chunk_attention_config has no sparse_attention_config")
    if isinstance(sac, str):
        path = sac if os.path.isabs(sac) or base_dir is None else os.path.join(base_dir, sac)
        with open(path) as f:
            sac = json.load(f)
    return from_minference(sac), flags


def kv_heads_per_rank(num_kv_heads, tp_size):
    if num_kv_heads % tp_size == 0:
        return num_kv_heads // tp_size
    if tp_size % num_kv_heads == 0:
        return 1  # replicated KV heads
    raise ConfigError(f"{num_kv_heads} KV heads cannot be split over tp={tp_size}")


def rank_model_id(model_id, tp_size, rank):
    return model_id if tp_size == 1 else f"{model_id}.tp{tp_size}.r{rank}"


def slice_for_rank(configs, num_q_heads, tp_size, rank):
    """The configs of rank `rank`'s query heads, renumbered from 0."""
    if tp_size < 1 or num_q_heads % tp_size:
        raise ConfigError(f"tp={tp_size} does not divide {num_q_heads} query heads")
    if not 0 <= rank < tp_size:
        raise ConfigError(f"rank {rank} outside tp={tp_size}")
    per = num_q_heads // tp_size
    lo = rank * per
    return [dict(c, head=c["head"] - lo) for c in configs if lo <= c["head"] < lo + per]


def _method_json(m):
    name = m["method"]
    out = {"method": "METHOD_" + name.upper()}
    params = {k: v for k, v in m.items() if k != "method"}
    if name in _PARAMS_KEY:
        out[_PARAMS_KEY[name]] = params
    return out


def convert(configs, model_id, num_layers, num_q_heads, num_kv_heads, head_dim, tp_size=1,
            rope_theta=0.0, default_method=None, description=""):
    """-> {rank: {"model_id", "model": Model JSON, "configs": GetHeadConfigsResponse JSON}}."""
    for c in configs:
        if not 0 <= c["layer"] < num_layers:
            raise ConfigError(f"layer {c['layer']} outside the model's {num_layers} layers")
        if not 0 <= c["head"] < num_q_heads:
            raise ConfigError(f"layer {c['layer']}: head {c['head']} outside {num_q_heads} heads")
    kv = kv_heads_per_rank(num_kv_heads, tp_size)
    out = {}
    for rank in range(tp_size):
        mid = rank_model_id(model_id, tp_size, rank)
        model = {"model_id": mid, "num_layers": num_layers,
                 "num_q_heads": num_q_heads // tp_size, "num_kv_heads": kv, "head_dim": head_dim,
                 "description": description or (f"{model_id} tp={tp_size} rank {rank}"
                                                if tp_size > 1 else model_id)}
        if rope_theta:
            model["rope_theta"] = rope_theta
        if default_method:
            model["default_method"] = _method_json(default_method)
        rows = [{"layer": c["layer"], "head": c["head"], "method": _method_json(c["method"]),
                 "search_score": c.get("score", 0.0)}
                for c in slice_for_rank(configs, num_q_heads, tp_size, rank)]
        out[rank] = {"model_id": mid, "model": model, "configs": {"configs": rows}}
    return out


def publish(converted, address, description="converted"):
    """Writes each rank's model + configs into the index service at `address` as a new version
    and publishes it (compare-and-set on the current version). Returns {model_id: version}."""
    import grpc
    from google.protobuf import json_format
    from spattn.v1 import index_service_pb2 as ipb
    from spattn.v1 import index_service_pb2_grpc as igrpc
    stub = igrpc.IndexServiceStub(grpc.insecure_channel(address))
    versions = {}
    for rank in sorted(converted):
        r = converted[rank]
        model = json_format.ParseDict(r["model"], ipb.Model())
        stub.PutModel(ipb.PutModelRequest(model=model), timeout=30)
        current = stub.ListVersions(ipb.ListVersionsRequest(model_id=r["model_id"]),
                                    timeout=30).published_version
        v = stub.CreateVersion(ipb.CreateVersionRequest(model_id=r["model_id"],
                                                        description=description),
                               timeout=30).version
        resp = json_format.ParseDict(r["configs"], ipb.GetHeadConfigsResponse())
        stub.PutHeadConfigs(ipb.PutHeadConfigsRequest(model_id=r["model_id"], version=v,
                                                      configs=resp.configs), timeout=60)
        stub.SealVersion(ipb.SealVersionRequest(model_id=r["model_id"], version=v), timeout=30)
        stub.PublishVersion(ipb.PublishVersionRequest(model_id=r["model_id"], version=v,
                                                      expected_current_version=current),
                            timeout=30)
        versions[r["model_id"]] = v
    return versions


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--minference", help="MInference per-head JSON file")
    src.add_argument("--hf_config", help="HF config.json with dual_chunk_attention_config")
    ap.add_argument("--model", required=True, help="model id in the index service")
    ap.add_argument("--layers", type=int, help="default: num_hidden_layers of --hf_config")
    ap.add_argument("--q_heads", type=int, help="default: num_attention_heads of --hf_config")
    ap.add_argument("--kv_heads", type=int, help="default: num_key_value_heads of --hf_config")
    ap.add_argument("--head_dim", type=int, help="default: hidden_size / num_attention_heads")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    ap.add_argument("--out", help="directory for <model_id>.model.json / .configs.json")
    ap.add_argument("--publish", help="index service HOST:PORT to publish into")
    a = ap.parse_args(argv)
    hf, flags = {}, {}
    if a.hf_config:
        with open(a.hf_config) as f:
            hf = json.load(f)
        configs, flags = from_dual_chunk_config(hf, os.path.dirname(a.hf_config))
    else:
        with open(a.minference) as f:
            configs = from_minference(json.load(f))
    q = a.q_heads or hf.get("num_attention_heads")
    dims = dict(num_layers=a.layers or hf.get("num_hidden_layers"), num_q_heads=q,
                num_kv_heads=a.kv_heads or hf.get("num_key_value_heads", q),
                head_dim=a.head_dim or hf.get("head_dim") or (
                    hf["hidden_size"] // q if hf.get("hidden_size") and q else None))
    missing = [k for k, v in dims.items() if not v]
    if missing:
        ap.error(f"missing model dimensions {missing}: pass them or --hf_config")
    conv = convert(configs, a.model, tp_size=a.tp, rope_theta=hf.get("rope_theta", 0.0), **dims)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for r in conv.values():
            for kind in ("model", "configs"):
                with open(os.path.join(a.out, f"{r['model_id']}.{kind}.json"), "w") as f:
                    json.dump(r[kind], f, indent=1)
    if a.publish:
        for mid, v in publish(conv, a.publish).items():
            print(f"published {mid} version {v}")
    for r in conv.values():
        print(f"{r['model_id']}: {len(r['configs']['configs'])} head configs")
    if flags:
        print("worker flags: " + " ".join(f"--{k}={v}" for k, v in flags.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
