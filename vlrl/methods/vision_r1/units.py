"""Units of a numeric answer: ``5 m`` is not ``5 cm``, but ``500 cm`` is ``5 m``.

Answers in geometry and physics problems carry units, and a grader that strips them pays ``5 cm``
for a gold ``5 m``. The rule, applied after both sides parsed as numbers:

* only one side names a unit (``5`` vs ``5 cm``): the numbers decide (the question fixed the unit);
* both name units of the same dimension in :data:`UNITS`: convert both to the base unit, compare;
* both name units that differ and cannot be converted (``5 apples`` vs ``5 cm``): not equal.
"""

from __future__ import annotations

# unit → (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {}
for _names, _dim, _f in (
    (("mm", "millimeter", "millimeters", "millimetre", "millimetres"), "length", 1e-3),
    (("cm", "centimeter", "centimeters", "centimetre", "centimetres"), "length", 1e-2),
    (("m", "meter", "meters", "metre", "metres"), "length", 1.0),
    (("km", "kilometer", "kilometers", "kilometre", "kilometres"), "length", 1e3),
    (("in", "inch", "inches"), "length", 0.0254),
    (("ft", "foot", "feet"), "length", 0.3048),
    (("mg", "milligram", "milligrams"), "mass", 1e-6),
    (("g", "gram", "grams"), "mass", 1e-3),
    (("kg", "kilogram", "kilograms"), "mass", 1.0),
    (("s", "sec", "secs", "second", "seconds"), "time", 1.0),
    (("min", "mins", "minute", "minutes"), "time", 60.0),
    (("h", "hr", "hrs", "hour", "hours"), "time", 3600.0),
    (("ml", "milliliter", "milliliters", "millilitre", "millilitres"), "volume", 1e-3),
    (("l", "liter", "liters", "litre", "litres"), "volume", 1.0),
    (("°", "deg", "degree", "degrees"), "angle", 1.0),
    (("cm^2", "cm2", "cm²"), "area", 1e-4),
    (("m^2", "m2", "m²"), "area", 1.0),
    (("cm^3", "cm3", "cm³"), "volume", 1e-3),
):
    for _n in _names:
        UNITS[_n] = (_dim, _f)


def normalize_unit(unit: str | None) -> str | None:
    if not unit:
        return None
    u = unit.strip().rstrip(".").lower()
    u = u.replace("\\text{", "").replace("\\mathrm{", "").replace("}", "").replace("\\,", "").strip()
    return u or None


def units_compatible(pv: float, pu: str | None, gv: float, gu: str | None) -> tuple[float, float] | None:
    """Values to compare numerically, or None when the units make them unequal."""
    pu, gu = normalize_unit(pu), normalize_unit(gu)
    if pu is None or gu is None or pu == gu:
        return pv, gv
    if pu in UNITS and gu in UNITS and UNITS[pu][0] == UNITS[gu][0]:
        return pv * UNITS[pu][1], gv * UNITS[gu][1]
    return None
