"""Fits the polynomial of one_plus_erf_approx (src/ops/fast_math.h) and prints it as C++ constants.

  /usr/bin/python3 scripts/fit_erf.py

erfc(a) = exp(-a^2) Q(t), t = 1 / (1 + a/2), for 0 <= a <= 9, Q of degree 9: least squares on
Chebyshev nodes, weighted for relative error, then rounded to float. The printed maximum relative
error (about 6e-8, in double with the float coefficients) is about one float ulp, so the float
evaluation's own rounding (a few ulp) dominates.
"""
import math

import numpy as np


def chebyshev(lo, hi, n=8000):
    return np.cos(np.pi * (np.arange(n) + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2


erfc = np.vectorize(math.erfc)
x = chebyshev(0.0, 9.0)
target = erfc(x) * np.exp(x * x)
A = np.vstack([(1 / (1 + 0.5 * x)) ** k for k in range(10)]).T
q, *_ = np.linalg.lstsq(A / target[:, None], np.ones_like(target), rcond=None)
q = q.astype(np.float32).astype(np.float64)
xt = np.linspace(0, 9, 90001)
print("// erfc(a) = exp(-a^2) Q(1 / (1 + a/2)), 0 <= a <= 9: max relative error %.2e" %
      np.max(np.abs(np.polyval(q[::-1], 1 / (1 + 0.5 * xt)) * np.exp(-xt * xt) / erfc(xt) - 1)))
print("kErfc[] = {" + ", ".join("%.10ef" % c for c in q) + "};")
