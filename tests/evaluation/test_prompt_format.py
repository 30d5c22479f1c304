"""How ``lightning-fed evaluate`` prompts the evaluated model: as the run was trained, unless told."""

from lightning_fed.evaluation.judge_run import JudgeOptions, prompt_format
from lightning_fed.evaluation.lm_eval_tasks import LmEvalOptions, follow_run_format
from lightning_fed.evaluation.run_model import run_prompt_format


def _config(**data_args):
    return {"data": {"class_path": "lightning_fed.datamodules.PreferenceDataModule", "init_args": data_args}}


def test_the_runs_template_and_system_prompt_are_followed_unless_overridden():
    assert run_prompt_format(_config(template="chat", system_prompt="Be brief.")) == ("chat", "Be brief.")
    assert run_prompt_format(_config(template="shp")) == (None, None)  # a selector's prompt, not a policy's
    assert run_prompt_format({}) == (None, None)  # a bare --model

    judge = JudgeOptions(url="http://localhost:1/v1", model="m")
    assert prompt_format(judge, "chat", "Be brief.") == ("chat", "Be brief.")
    assert prompt_format(judge, None, None) == ("plain", None)
    other = JudgeOptions(url="http://localhost:1/v1", model="m", template="alpaca")
    assert prompt_format(other, "chat", "Be brief.") == ("alpaca", None)  # not the run's template: no system turn
    own = JudgeOptions(url="http://localhost:1/v1", model="m", system_prompt="Answer in French.")
    assert prompt_format(own, "chat", "Be brief.") == ("chat", "Answer in French.")

    def chat(options, *run):
        resolved = follow_run_format(options, *run)
        return resolved.apply_chat_template, resolved.system_instruction

    assert chat(LmEvalOptions(tasks=["t"]), "chat", "Be brief.") == (True, "Be brief.")
    assert chat(LmEvalOptions(tasks=["t"]), "alpaca", None) == (False, None)
    assert chat(LmEvalOptions(tasks=["t"]), None, None) == (False, None)
    assert chat(LmEvalOptions(tasks=["t"], apply_chat_template=False), "chat", "Be brief.") == (False, None)
    assert chat(LmEvalOptions(tasks=["t"], system_instruction="Hi."), "chat", "Be brief.") == (True, "Hi.")
    assert chat(LmEvalOptions(tasks=["t"], apply_chat_template=True), None, None) == (True, None)
