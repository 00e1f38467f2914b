"""Method names <-> MethodConfig protos ("vertical_slash" or {"method": ..., params...})."""
from spattn.v1 import common_pb2

METHODS = ["dense", "a_shape", "vertical_slash", "block_sparse", "flex_prefill",
           "sample_attention", "anchor", "saap", "sampled_lines"]
# The MethodConfig oneof field holding each method's params (dense has none).
PARAMS_FIELD = {m: m for m in METHODS if m != "dense"}


def method_enum(name):
    try:
        return common_pb2.Method.Value("METHOD_" + name.upper())
    except ValueError:
        raise ValueError(f"unknown method {name!r}; one of {METHODS}") from None


def method_name(value):
    return common_pb2.Method.Name(value)[len("METHOD_"):].lower()


def method_config(spec):
    """str | dict | MethodConfig -> MethodConfig. A dict is {"method": name, <param>: value};
    parameter names are those of the method's params message in proto/spattn/v1/common.proto."""
    if isinstance(spec, common_pb2.MethodConfig):
        return spec
    if isinstance(spec, str):
        spec = {"method": spec}
    if not isinstance(spec, dict) or "method" not in spec:
        raise TypeError("method must be a name, {'method': name, ...params} or a MethodConfig")
    name = spec["method"]
    cfg = common_pb2.MethodConfig(method=method_enum(name))
    params = {k: v for k, v in spec.items() if k != "method"}
    if params:
        if name not in PARAMS_FIELD:
            raise ValueError(f"method {name} takes no parameters, got {sorted(params)}")
        msg = getattr(cfg, PARAMS_FIELD[name])
        for k, v in params.items():
            if k not in msg.DESCRIPTOR.fields_by_name:
                raise ValueError(f"{name} has no parameter {k!r}; "
                                 f"one of {sorted(msg.DESCRIPTOR.fields_by_name)}")
            setattr(msg, k, v)
    elif name in PARAMS_FIELD:
        getattr(cfg, PARAMS_FIELD[name]).SetInParent()
    return cfg


def method_dict(cfg):
    """MethodConfig -> {"method": name, params set to non-default values}."""
    name = method_name(cfg.method)
    out = {"method": name}
    if name in PARAMS_FIELD and cfg.HasField(PARAMS_FIELD[name]):
        for f, v in getattr(cfg, PARAMS_FIELD[name]).ListFields():
            out[f.name] = v
    return out
