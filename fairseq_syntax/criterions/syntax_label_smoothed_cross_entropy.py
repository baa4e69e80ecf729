"""`syntax_label_smoothed_cross_entropy`: fairseq's label-smoothed cross-entropy plus the auxiliary losses of the
model's syntax mechanisms (LISA's parent loss, Dyn-STGCD's graph loss, ...).

A mechanism returns each auxiliary loss as a sum over its tokens, like the translation loss, and names the option
that holds its weight (mechanisms.py); the model passes both on in its output (extra["auxiliary_losses"],
extra["auxiliary_loss_weights"]). The training loss is  loss + sum_k weight_k * aux_k,  and each aux_k is logged
under its own name, per sample and in base 2 like fairseq's loss.
"""
import math

import torch
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

PREFIX = "aux_"  # logging-output keys of auxiliary losses


@register_criterion("syntax_label_smoothed_cross_entropy", dataclass=LabelSmoothedCrossEntropyCriterionConfig)
class SyntaxLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    adds_auxiliary_losses = True  # the task refuses other criteria for models that have such losses

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        extra = net_output[1] if isinstance(net_output[1], dict) else {}
        ntokens = sample["ntokens"]
        if extra.get("predicted") is not None:
            # a decoder that predicts only some positions (BiTran's sampled prefixes; the model's get_targets pads
            # the others): the loss is per predicted token, and fairseq's wps counts those
            ntokens = int(extra["predicted"].sum())
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
