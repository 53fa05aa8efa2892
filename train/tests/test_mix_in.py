"""train/rank/patches.py mix_in: the one way a rank's model gets another forward (mlm_head's head at masked
positions, kernels' fused cross-entropy). Plain classes stand in for a model: no torch, a fast-tier test."""

from train.rank.patches import mix_in


class Model:
    def __init__(self, scale):
        self.scale = scale

    def forward(self, x):
        return x * self.scale


class Doubled:
    def forward(self, x):
        return 2 * super().forward(x)


class PlusOne:
    def forward(self, x):
        return super().forward(x) + 1


def test_the_mixins_forward_runs_first_and_reaches_the_models_own():
    model = Model(3)
    assert mix_in(model, Doubled) is model
    assert model.forward(5) == 30 and model.scale == 3
    assert isinstance(model, Model) and isinstance(model, Doubled)
    # the class keeps its name, module and qualname (save_pretrained writes the stock architectures from them)
    assert (type(model).__name__, type(model).__module__, type(model).__qualname__) == \
        (Model.__name__, Model.__module__, Model.__qualname__)
    assert type(model) is not Model and type(model).__mro__[1:3] == (Doubled, Model)


def test_mixing_twice_changes_nothing_and_models_of_one_class_share_the_subclass():
    a, b = Model(1), Model(2)
    mix_in(a, Doubled)
    mixed = type(a)
    mix_in(a, Doubled)
    assert type(a) is mixed and a.forward(4) == 8  # not doubled twice
    mix_in(b, Doubled)
    assert type(b) is mixed and b.forward(4) == 16


def test_two_mixins_compose_and_each_pair_gets_its_own_subclass():
    doubled, plus = Model(1), Model(1)
    mix_in(doubled, Doubled)
    mix_in(plus, PlusOne)
    assert type(doubled) is not type(plus)
    assert (doubled.forward(5), plus.forward(5)) == (10, 6)
    mix_in(doubled, PlusOne)  # PlusOne in front of (Doubled, Model): (2 * 5) + 1
    assert doubled.forward(5) == 11
    assert plus.forward(5) == 6  # the other model is untouched
