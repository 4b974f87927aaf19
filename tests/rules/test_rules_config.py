"""Parameters, the registry, entry-point plugins, rules_from_config, actions (callback, log, webhook)."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import warnings

import numpy as np
import pytest
from rules_synth import record, tensor

from trainspect.exceptions import ConfigError
from trainspect.rules import (
    TENSOR_RULES,
    AllZero,
    Callback,
    ExplodingTensor,
    LiveRuleRunner,
    LogAction,
    LossNotDecreasing,
    NLPSequenceRatio,
    Requirement,
    RuleRegistry,
    StopTraining,
    TensorRule,
    VanishingGradient,
    Webhook,
    default_registry,
    default_rules,
    parse_actions,
    rules_from_config,
)
from trainspect.rules.registry import _profiler_rules

REQUIRED = {
    "AllZero": {"tensor_regex": "x"},
    "TensorVariance": {"tensor_regex": "x", "max_threshold": "1"},
    "UnchangedTensor": {"collection_names": "weights"},
    "SimilarAcrossRuns": {"other_trials": "/nonexistent"},
}


@pytest.mark.parametrize("cls", TENSOR_RULES, ids=lambda c: c.__name__)
def test_every_builtin_constructs_documents_and_declares_inputs(cls):
    rule = cls(**REQUIRED.get(cls.__name__, {}))
    assert rule.name == cls.__name__ and rule.recommendation
    assert "Heuristic" in cls.__doc__ or "heuristic" in cls.__doc__.lower()
    assert isinstance(rule, TensorRule) and rule.has_check()
    assert all(isinstance(r, Requirement) for r in rule.requirements())
    assert rule.selects()
    as_text = lambda v: ",".join(v) if isinstance(v, list) else str(v)  # noqa: E731
    clone = cls(**{k: as_text(v) for k, v in rule.params.items() if v is not None})
    assert clone.params == rule.params  # every parameter accepts its string form


def test_parameters_are_validated_at_construction():
    assert VanishingGradient(threshold="1e-5").params["threshold"] == 1e-5
    assert ExplodingTensor(only_nan="True").params["only_nan"] is True
    assert AllZero(collection_names="weights, gradients").params["collection_names"] == ["weights", "gradients"]
    with pytest.raises(ConfigError, match="threshold"):
        VanishingGradient(threshold="abc")
    with pytest.raises(ConfigError, match="out of range"):
        VanishingGradient(threshold=-1)
    with pytest.raises(ConfigError, match="allowed: threshold"):
        VanishingGradient(treshold=1)
    with pytest.raises(ConfigError, match="collection_names or tensor_regex"):
        AllZero()
    with pytest.raises(ConfigError, match="mode"):
        LossNotDecreasing(mode="sideways")
    with pytest.raises(ConfigError, match="one threshold per token"):
        NLPSequenceRatio(token_values="0,1,2", token_thresholds_percent="5,6")
    with pytest.raises(ConfigError, match="only_nan"):
        ExplodingTensor(only_nan="maybe")


def test_default_rules_are_cheap_and_record_reductions_only():
    rules = default_rules()
    assert [r.name for r in rules] == ["VanishingGradient", "ExplodingTensor", "LossNotDecreasing"]
    reqs = [req for r in rules for req in r.requirements()]
    grads = [r for r in reqs if r.collection == "gradients"]
    assert grads and all(not r.raw for r in grads)
    assert {"abs_mean", "min", "max"} <= {red for r in grads for red in r.reductions}


def test_requirements_of_activation_rules_name_module_types():
    from trainspect.rules import DeadRelu, PoorWeightInitialization, SaturatedActivation

    (relu,) = DeadRelu().requirements()
    assert relu.module_types == ("ReLU", "LeakyReLU") and relu.module_outputs
    pwi = PoorWeightInitialization().requirements()[0]
    assert pwi.module_types == ("ReLU",) and pwi.module_inputs and pwi.save_interval == 1 and pwi.end_step == 10
    sat = {r.collection: r for r in SaturatedActivation().requirements()}
    assert sat["tanh_input"].module_types == ("Tanh",) and sat["sigmoid_input"].module_inputs


def test_rules_from_config_case_insensitive_with_actions():
    rules = rules_from_config(
        [
            {
                "Name": "explodingtensor",
                "Parameters": {"only_nan": "True"},
                "Actions": ["StopTraining", {"name": "webhook", "url": "http://127.0.0.1:9/x"}],
            },
            {"rule_to_invoke": "VanishingGradient", "parameters": {"Threshold": "0.001"}},
            "LossNotDecreasing",
        ]
    )
    assert [r.name for r in rules] == ["ExplodingTensor", "VanishingGradient", "LossNotDecreasing"]
    assert rules[0].params["only_nan"] is True and rules[1].params["threshold"] == 0.001
    assert isinstance(rules[0].actions[0], StopTraining) and isinstance(rules[0].actions[1], Webhook)


def test_rules_from_config_unknown_names_list_valid_ones():
    with pytest.raises(ConfigError, match="valid rules: .*VanishingGradient"):
        rules_from_config([{"name": "NoSuchRule"}])
    with pytest.raises(ConfigError, match="allowed: StopTraining"):
        rules_from_config([{"name": "ExplodingTensor", "actions": ["sms"]}])
    with pytest.raises(ConfigError, match="allowed: collection_names"):
        rules_from_config([{"name": "ExplodingTensor", "parameters": {"bogus": 1}}])


def test_parse_actions_forms():
    def fn(v):
        return None

    acts = parse_actions(['[{"name": "stoptraining"}]', fn, LogAction("info"), {"name": "Log", "level": "ERROR"}])
    assert [type(a) for a in acts] == [StopTraining, Callback, LogAction, LogAction]
    assert acts[3].level == logging.ERROR
    with pytest.raises(ConfigError, match="url"):
        Webhook("ftp://x")


class _Broken:
    name = "broken"

    def load(self):
        raise ImportError("plugin is broken")


class _Good:
    name = "good"

    def load(self):
        class PluginRule(TensorRule):
            def check(self, state, data):
                return None

        return PluginRule


def test_registry_loads_plugins_and_warns_on_broken_ones(monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "entry_points", lambda group: [_Broken(), _Good()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = default_registry()
    assert "PluginRule" in reg and "pluginrule" in reg
    assert any("broken" in str(w.message) for w in caught)
    builtin = [c.__name__ for c in (*TENSOR_RULES, *_profiler_rules())]
    assert reg.names()[: len(builtin)] == builtin and reg.names()[len(builtin) :] == ["PluginRule"]


def test_registry_rejects_non_rules_and_duplicates():
    reg = RuleRegistry()
    reg.register(VanishingGradient)
    with pytest.raises(ConfigError):
        reg.register(int)  # type: ignore[arg-type]

    class VanishingGradient2(VanishingGradient):
        kind = "weird"

    with pytest.raises(ConfigError, match="kind"):
        reg.register(VanishingGradient2)


def test_profiler_rules_join_the_registry_when_importable():
    profiler = _profiler_rules()
    reg = default_registry(plugins=False)
    assert all(c.kind == "profiler" and c.__name__ in reg for c in profiler)


class _Handler(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Handler.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_actions_fire_once_per_rule_callback_log_webhook(tmp_path, caplog):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.received.clear()
    try:
        seen = []
        url = f"http://127.0.0.1:{server.server_port}/hook"
        rule = ExplodingTensor(actions=[seen.append, "log", {"name": "webhook", "url": url, "timeout": 5}])
        runner = LiveRuleRunner([rule], tmp_path, poll=0.05)
        runner.start()
        with caplog.at_level(logging.WARNING, logger="trainspect.rules.actions"):
            for i in range(5):
                runner.submit(record(i, [tensor("w", np.array([np.nan if i >= 2 else 1.0]))]))
            runner.close()
        assert len(seen) == 1 and seen[0].first_trigger_step == 2
        assert any("ExplodingTensor found issues" in r.message for r in caplog.records)
        assert len(_Handler.received) == 1
        ctype, body = _Handler.received[0]
        assert ctype == "application/json" and body["rule"] == "ExplodingTensor" and body["status"] == "IssuesFound"
    finally:
        server.shutdown()
        server.server_close()


def test_webhook_failure_never_raises(caplog):
    from trainspect.rules import Status, Verdict

    hook = Webhook("http://127.0.0.1:9/unreachable", timeout=0.5)
    with caplog.at_level(logging.WARNING):
        hook.fire(Verdict(rule="X", status=Status.ISSUES_FOUND))
        hook.wait(5)
    assert any("webhook POST" in r.message for r in caplog.records)
