"""The table-service pool's CPU check runs before anything starts (pure logic: a stand-in
for Ray's resource view)."""

import pytest

from memtier.cluster import _check_pool_fits
from memtier.config import ServicesConfig, load
from memtier.errors import InvalidArgumentError


class FreeCpus:
    def __init__(self, free: float) -> None:
        self.free = free

    def available_resources(self) -> dict[str, float]:
        return {"CPU": self.free}


def test_a_pool_that_fits_passes() -> None:
    _check_pool_fits(FreeCpus(1.0), load(ServicesConfig, {}))
    _check_pool_fits(FreeCpus(0.0), load(ServicesConfig, {"services.workers": "0"}))


def test_a_pool_that_cannot_fit_names_the_settings() -> None:
    config = load(ServicesConfig, {"services.workers": "2", "services.cpus": "1"})
    with pytest.raises(InvalidArgumentError, match=r"needs 2 CPUs.*services.workers=2.*0.5 free"):
        _check_pool_fits(FreeCpus(0.5), config)
