"""`syntax_label_smoothed_cross_entropy`: fairseq's label-smoothed cross-entropy plus the auxiliary losses of the
model's syntax mechanisms (LISA's parent loss, Dyn-STGCD's graph loss, ...) and, on request, word-level
distillation from a teacher.

A mechanism returns each auxiliary loss as a sum over its tokens, like the translation loss, and names the option
that holds its weight (mechanisms.py); the model passes both on in its output (extra["auxiliary_losses"],
extra["auxiliary_loss_weights"]). The training loss is  loss + sum_k weight_k * aux_k,  and each aux_k is logged
under its own name, per sample and in base 2 like fairseq's loss.

Word-level knowledge distillation (Kim & Rush 2016, the "distribution-level KD" Dyn-STGCD's paper tests): with
--distillation-teacher CHECKPOINT, a trained model of the same task (target dictionary) scores every batch too, and
the loss adds  --distillation-weight x sum over target tokens of -sum_v q(v) log p(v),  q the teacher's next-token
distribution, p the model's (logged as aux_distillation). Sequence-level KD needs no option: train on a data-bin
whose targets are the teacher's translations of the training source.
"""
from dataclasses import dataclass, field
from typing import Optional

import math

import torch
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from ..models.decoders import PREDICTED

PREFIX = "aux_"  # logging-output keys of auxiliary losses


DISTILLATION = "distillation"


@dataclass
class SyntaxLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    distillation_teacher: Optional[str] = field(
        default=None, metadata={"help": "word-level knowledge distillation from this checkpoint (a model of the same "
                                        "task and target dictionary): its next-token distributions are soft targets"})
    distillation_weight: float = field(
        default=1.0, metadata={"help": "weight of the distillation term (with --distillation-teacher)"})


@register_criterion("syntax_label_smoothed_cross_entropy", dataclass=SyntaxLabelSmoothedCrossEntropyConfig)
class SyntaxLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    adds_auxiliary_losses = True  # the task refuses other criteria for models that have such losses

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 distillation_teacher: Optional[str] = None, distillation_weight: float = 1.0):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size=ignore_prefix_size,
                         report_accuracy=report_accuracy)
        self.distillation_teacher, self.distillation_weight = distillation_teacher, distillation_weight
        self._teacher = None

    def teacher(self, model):
        """The distillation teacher, loaded on first use (the task's model decides which batch features exist), in
        eval mode on the model's device and dtype."""
        if self._teacher is None:
            from fairseq import checkpoint_utils

            task = self.task
            kept = {name: getattr(task, name) for name in ("auxiliary_losses", "partial_targets")
                    if hasattr(task, name)}
            features = set(getattr(task, "net_input_features", set()))
            (teacher,), _ = checkpoint_utils.load_model_ensemble([self.distillation_teacher], task=task)
            for name, value in kept.items():  # building the teacher set them for it: the model's stay
                setattr(task, name, value)
            extra = set(getattr(teacher, "syntax_features", ())) - set(getattr(model, "syntax_features", ()))
            if hasattr(task, "net_input_features"):
                task.net_input_features.intersection_update(features)
            if extra:
                raise ValueError(f"--distillation-teacher {self.distillation_teacher}: the teacher reads the batch "
                                 f"features {sorted(extra)}, which the model does not; use a teacher that reads no "
                                 f"more syntax than the model")
            if len(teacher.decoder.dictionary) != len(task.target_dictionary):
                raise ValueError(f"--distillation-teacher {self.distillation_teacher}: its target dictionary has "
                                 f"{len(teacher.decoder.dictionary)} symbols, this task's "
                                 f"{len(task.target_dictionary)}")
            self._teacher = teacher.eval()
            for parameter in self._teacher.parameters():
                parameter.requires_grad_(False)
        reference = next(model.parameters())
        return self._teacher.to(device=reference.device, dtype=reference.dtype)

    def distillation_loss(self, model, net_output, sample):
        """sum over the target's real tokens of -sum_v q(v) log p(v), q the teacher's distribution."""
        teacher = self.teacher(model)
        net_input = sample["net_input"]
        wanted = set(getattr(teacher, "syntax_features", ()))
        inputs = {name: value for name, value in net_input.items()
                  if name in ("src_tokens", "src_lengths", "prev_output_tokens") or name in wanted}
        with torch.no_grad():
            teacher_output = teacher(**inputs)
            soft = teacher.get_normalized_probs(teacher_output, log_probs=False).float()
        lprobs = model.get_normalized_probs(net_output, log_probs=True).float()
        real = model.get_targets(sample, net_output).ne(self.padding_idx)
        if lprobs.shape[:2] != real.shape or soft.shape != lprobs.shape:
            raise ValueError("--distillation-teacher: the model predicts only some target positions (sampled "
                             "prefixes); distillation needs every position")
        return -((soft * lprobs).sum(dim=-1) * real).sum()

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        extra = net_output[1] if isinstance(net_output[1], dict) else {}
        ntokens = sample["ntokens"]
        if extra.get(PREDICTED) is not None:
            # a decoder that predicts only some positions (BiTran's sampled prefixes; the model's get_targets pads
            # the others): the loss is per predicted token, and fairseq's wps counts those
            ntokens = int(extra[PREDICTED].sum())
        sample_size = sample["target"].size(0) if self.sentence_avg else ntokens
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": ntokens,
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        weights = extra.get("auxiliary_loss_weights", {})
        for name, value in extra.get("auxiliary_losses", {}).items():
            loss = loss + weights[name] * value
            logging_output[PREFIX + name] = value.data
        if self.distillation_teacher:
            distillation = self.distillation_loss(model, net_output, sample)
            loss = loss + self.distillation_weight * distillation
            logging_output[PREFIX + DISTILLATION] = distillation.data
        logging_output["loss"] = loss.data
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        names = sorted({key for log in logging_outputs for key in log if key.startswith(PREFIX)})
        for name in names:
            total = sum(log.get(name, 0) for log in logging_outputs)
            total = total.item() if torch.is_tensor(total) else total
            metrics.log_scalar(name, total / max(sample_size, 1) / math.log(2), sample_size, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
