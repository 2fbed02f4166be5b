"""Fits the polynomials of erf_approx (src/ops/fast_math.h) and prints them as C++ constants.

  /usr/bin/python3 scripts/fit_erf.py

erf(a) = a P(a^2) for 0 <= a < 1, P of degree 5, and erfc(a) = exp(-a^2) Q(t), t = 1 / (1 + a/2),
for 1 <= a <= 9, Q of degree 9: least squares on Chebyshev nodes, weighted for relative error. The
printed maximum relative errors (about 4e-8 and 4e-10, in double) are below float's 6e-8 half ulp,
so the float evaluation's own rounding dominates.
"""
import math

import numpy as np


def fit(x, target, basis, degree):
    A = np.vstack([basis(x) ** k for k in range(degree + 1)]).T
    coef, *_ = np.linalg.lstsq(A / target[:, None], np.ones_like(target), rcond=None)
    return coef


def chebyshev(lo, hi, n=6000):
    return np.cos(np.pi * (np.arange(n) + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2


erf, erfc = np.vectorize(math.erf), np.vectorize(math.erfc)
x = chebyshev(1e-6, 1.0)
p = fit(x, erf(x) / x, lambda v: v * v, 5)
xt = np.linspace(1e-4, 1, 20001)
print("// erf(a) = a P(a^2), 0 <= a < 1: max relative error %.2e" %
      np.max(np.abs(np.polyval(p[::-1], xt * xt) * xt / erf(xt) - 1)))
print("kErfSmall[] = {" + ", ".join("%.10ef" % c for c in p) + "};")
x = chebyshev(1.0, 9.0)
q = fit(x, erfc(x) * np.exp(x * x), lambda v: 1 / (1 + 0.5 * v), 9)
xt = np.linspace(1, 9, 40001)
print("// erfc(a) = exp(-a^2) Q(1 / (1 + a/2)), 1 <= a <= 9: max relative error %.2e" %
      np.max(np.abs(np.polyval(q[::-1], 1 / (1 + 0.5 * xt)) * np.exp(-xt * xt) / erfc(xt) - 1)))
print("kErfcLarge[] = {" + ", ".join("%.10ef" % c for c in q) + "};")
