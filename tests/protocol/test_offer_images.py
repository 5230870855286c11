"""What a refusal for a missing image lists: a handful of the provider's images, those that
share the wanted image's name first, so many others do not hide the one the renter meant."""

from __future__ import annotations

from offchain.protocol.job.offer import ImageSupply, OfferedImage, listed

OTHERS = [f"unchained/aaa-{n}:latest" for n in range(12)]


def test_images_that_share_the_wanted_name_come_first() -> None:
    shown = listed([*OTHERS, "unchained/python-numpy:latest"], near="python:3.11-slim")
    assert shown.startswith("unchained/python-numpy:latest, unchained/aaa-0:latest")
    assert shown.endswith(" and 5 more")


def test_without_a_wanted_name_they_are_sorted() -> None:
    assert listed(["b:1", "a:1"]) == "a:1, b:1"
    assert listed([]) == "none"


def test_the_supply_names_what_is_near_what_was_asked() -> None:
    digest = "sha256:" + "0" * 64
    images = [OfferedImage(reference=r, digest=digest) for r in [*OTHERS, "my/torch:2"]]
    said = ImageSupply.of(images).missing("torch:2.4")
    assert said.startswith("the provider has no image torch:2.4 and pulls none; it has: my/torch:2")
