"""The shipped backend (programming) tasks of ColBench, generated from small templates.

    python -m colbench.tasks.backend              # rewrites colbench/tasks/backend_{train,test,valid}.jsonl
    python -m colbench.tasks.backend --out DIR    # writes the three files into DIR instead

The output is byte-identical on every run: each family draws from its own `random.Random`
seeded with `--seed` and the family's name, never from the clock.

A *family* is one function below, e.g. `tip(rng)`. It draws the hidden details of one task
(constants, thresholds, rules, edge cases, output formats, rounding, tie-breaking, the order of
a returned tuple) and returns a `Variant`:
  description  what a user would vaguely ask; it reveals none of the hidden details and ends
               with the signature of the function
  source       the reference function (standard library only, `math` at most)
  facts        plain-language sentences, one hidden detail each, that the simulated human knows;
               worded with the words a person would ask about ("discount", "round", ...)
  tests        the arguments of the ten unit tests, chosen to exercise the hidden details

Tiers (the `FAMILIES` registry at the bottom lists every family with its tier):
  easy    one line of arithmetic with the family's hidden numbers, one or two numeric arguments,
          and a twist drawn per task (rounding, a minimum, a maximum or a flat fee) that the
          description hints at; two facts, sized for SmolLM2-135M and a three-turn budget
  medium  conditionals, thresholds, caps, string clean-up and formatting
  hard    lists and dicts, sorting and tie-breaking, tuple order, several interacting rules
Families marked test-only never appear in the train file, so the test set also measures
generalization to new kinds of request. Shared families get different draws in the two files.

A new family is appended to `FAMILIES`: the shipped lines stay as they are (same ids, same order, same
content) and the new family's tasks come after them, with the next ids (see `generate`).
"""
import argparse
import os
import random
import re
import textwrap
from collections import namedtuple
from string import Template

from colbench.data import write_jsonl
from colbench.tasks import FOLDER

SEED = 2503
TRAIN_PER_FAMILY = 15      # tasks per shared family in the train file
TEST_PER_SHARED = 2        # tasks per shared family in the test file
VALID_PER_SHARED = 2       # tasks per shared family in the validation file (fewer where a family has no more)
TEST_PER_TEST_ONLY = 4     # tasks per test-only family in the test file

Variant = namedtuple("Variant", "description source facts tests")
Family = namedtuple("Family", "name make tier test_only")


class Raw(str):
    """A piece of code spliced into a template as it is (plain values are spliced as repr)."""

    def __repr__(self):
        return str(self)


def code(template, **values):
    """The reference source: `template` dedented, each `$name` replaced by repr(value)."""
    text = textwrap.dedent(template).strip("\n") + "\n"
    return Template(text).substitute({name: repr(value) for name, value in values.items()})


def ask(request, source):
    """The description the agent sees: the vague request, then the reference's signature."""
    signature = next(line for line in source.splitlines() if line.startswith("def "))
    return f"{request} The signature of the function is: {signature.rstrip(':')}"


def num(x):
    """A number as a person would say it: 12 rather than 12.0."""
    return str(int(x)) if float(x).is_integer() else repr(x)


def tidy(x):
    """12.0 -> 12, so the reference reads `hours * 12`, not `hours * 12.0`."""
    return int(x) if float(x).is_integer() else x


def dollars(x):
    return f"{num(x)} dollar" + ("" if x == 1 else "s")


def plural(n, word):
    return f"{num(n)} {word}" + ("" if n == 1 else "s")


def money_amounts(rng, count, low, high):
    return [round(rng.uniform(low, high), 2) for _ in range(count)]


# ---------------------------------------------------------------- easy: one line of arithmetic, and a twist

# An easy task has two hidden details, one fact each: the family's own numbers (the same kind of fact in every
# task of the family), and a twist drawn per task from the kinds the family allows. The description hints at
# the twist in words that name it, never with its number. The embedded human tells one fact per question, the
# one the question names (colbench/simulators.py): a request for "more details" gets nothing, so what to ask
# depends on the family and on the task's description. The twist's fact quotes its code (`max(..., 10)`), as
# the official human, which answers from the reference code, often does: told "a minimum of 10" alone, the
# embedded 135M model wrote `min(` (colbench/simulators.py leaves quoted code out of a fact's subject).
TWIST_HINTS = {
    "round": ["I want it rounded my way.", "Rounding matters to me here.", "Please do the rounding the way I like."],
    "minimum": ["There is a minimum I always stick to.", "It should never go below my minimum.",
                "Keep my minimum in mind."],
    "maximum": ["There is a maximum I never go over.", "It should never go above my maximum.",
                "Keep my maximum in mind."],
    "fee": ["There is a flat fee as well.", "Don't forget the flat fee I add.", "A fee goes on top of it too."],
}
MONEY_TWISTS = ("round", "minimum", "maximum", "fee")


def nice(x):
    """A number a person would pick near x: whole from 10 up, else a multiple of 0.5."""
    return tidy(round(x)) if abs(x) >= 10 else tidy(round(2 * x) / 2)


def easy(rng, name, params, expression, request, noun, unit, main_fact, inputs, twists):
    """A Variant of `name(params)` returning `expression` (a Python expression of the parameters) with a twist
    drawn from `twists`; the twist's number is picked from the outputs of `expression` on the ten `inputs`,
    so that it changes three of them at least. None when no draw does (the caller draws again)."""
    twist = rng.choice(twists)
    plain = [eval(expression, {}, dict(zip(params, args))) for args in inputs]  # our own expression
    if twist == "round":
        digits = rng.choice([0, 1, 2])
        line, changed = f"round({expression}, {digits})", [round(x, digits) for x in plain]
        fact = (f"Round the {noun} to a whole number: " if digits == 0 else
                f"Round the {noun} to {plural(digits, 'decimal place')}: ")
    elif twist == "minimum":
        low = nice(sorted(plain)[rng.randint(3, 5)])
        line, changed = f"max({expression}, {low!r})", [max(x, low) for x in plain]
        fact = f"The {noun} has a minimum of {num(low)} {unit}: never less, "
    elif twist == "maximum":
        high = nice(sorted(plain)[rng.randint(4, 6)])
        line, changed = f"min({expression}, {high!r})", [min(x, high) for x in plain]
        fact = f"The {noun} has a maximum of {num(high)} {unit}: never more, "
    else:
        fee = rng.choice([1, 1.5, 2, 2.5, 3, 4, 5])
        line, changed = f"{expression} + {fee!r}", [x + fee for x in plain]
        fact = f"A flat fee of {dollars(fee)} is added to the {noun}: "
    if sum(a != b for a, b in zip(plain, changed)) < 3:
        return None
    fact += f"`{line.replace(expression, '...')}`."  # the twist's code quoted, the family's numbers left out
    source = f"def {name}({', '.join(params)}):\n    return {line}\n"
    description = ask(f"{request} {rng.choice(TWIST_HINTS[twist])}", source)
    return Variant(description, source, [main_fact, fact], inputs)


def tip(rng):
    percent = rng.randint(10, 25)
    bills = [10.0, 100.0, 35.5] + money_amounts(rng, 7, 5, 250)
    return easy(rng, "tip", ["bill"], f"bill * {percent / 100!r}",
                "I need a small function that works out how much tip to leave on a restaurant bill.",
                "tip", "dollars", f"The tip rate is {percent} percent of the bill.", [(b,) for b in bills],
                MONEY_TWISTS)


def delivery_charge(rng):
    base = rng.choice([2, 3, 4, 5, 6, 7.5, 8, 9.5])
    per_kg = rng.choice([0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4])
    weights = [0.5, 1, 10] + [rng.randint(1, 60) / 2 for _ in range(7)]
    return easy(rng, "delivery_charge", ["weight_kg"], f"{base!r} + {per_kg!r} * weight_kg",
                "Can you write a function that tells me what a delivery costs from the parcel's weight?",
                "charge", "dollars", f"The charge is a base of {dollars(base)} plus {dollars(per_kg)} per kilogram.",
                [(w,) for w in weights], MONEY_TWISTS)


def weekly_pay(rng):
    wage = tidy(rng.randint(48, 120) / 4)
    hours = [1, 40, 20.5] + [rng.randint(2, 100) / 2 for _ in range(7)]
    return easy(rng, "weekly_pay", ["hours"], f"hours * {wage!r}",
                "Write a function that tells me what I earn in a week from the hours I worked.",
                "pay", "dollars", f"The pay is an hourly wage of {dollars(wage)} per hour worked.", [(h,) for h in hours], MONEY_TWISTS)


def calories_burned(rng):
    per_minute = rng.randint(10, 29) / 2 + rng.choice([0, 0.25])
    minutes = [1, 60, 45] + [rng.randint(5, 120) for _ in range(7)]
    return easy(rng, "calories_burned", ["minutes"], f"minutes * {tidy(per_minute)!r}",
                "For my fitness app I want a function that estimates the calories burned on a bike ride from how "
                "long it lasted.", "calorie count", "calories",
                f"Cycling burns {num(per_minute)} calories per minute, so that is the calorie count.",
                [(m,) for m in minutes], ("round", "minimum", "maximum"))


def sale_price(rng):
    percent = rng.randint(5, 40)
    factor = round(1 - percent / 100, 2)
    prices = [100.0, 9.99, 42.5] + money_amounts(rng, 7, 1, 400)
    return easy(rng, "sale_price", ["price"], f"price * {factor!r}",
                "We are having a sale in my shop. Can you write a function that gives the sale price of an item?",
                "sale price", "dollars",
                f"The sale price has a discount of {percent} percent, so multiply the price by {factor!r}.",
                [(p,) for p in prices], MONEY_TWISTS)


def ticket_total(rng):
    adult = rng.randint(8, 20)
    child = rng.randint(3, adult - 2)
    groups = [(1, 0), (0, 1), (2, 3)] + [(rng.randint(0, 6), rng.randint(0, 6)) for _ in range(7)]
    return easy(rng, "ticket_total", ["adults", "children"], f"adults * {adult} + children * {child}",
                "I sell tickets for our zoo. Write a function for the total price a family pays.",
                "total", "dollars", f"The total is a ticket price of {dollars(adult)} per adult and {dollars(child)} per child.",
                groups, ("minimum", "maximum", "fee"))


def rental_late_fee(rng):
    rate = rng.randrange(10, 105, 5) / 100
    days = [1, 7, 3] + [rng.randint(2, 60) for _ in range(7)]
    return easy(rng, "rental_late_fee", ["days"], f"days * {rate!r}",
                "Our video rental store charges for late returns. Can you write the function that computes the "
                "late charge?", "late charge", "dollars", f"The late charge is a daily rate of {rate:.2f} dollars per day late.",
                [(d,) for d in days], ("round", "minimum", "maximum"))


def league_points(rng):
    win = rng.randint(2, 7)
    draw = rng.randint(1, win - 1)
    records = [(1, 0), (0, 1), (3, 2)] + [(rng.randint(0, 20), rng.randint(0, 10)) for _ in range(7)]
    return easy(rng, "league_points", ["wins", "draws"], f"wins * {win} + draws * {draw}",
                "I keep the table for our amateur football league. Write a function that gives a team's points.",
                "points total", "points", f"A win adds {plural(win, 'point')} and a draw {draw} to the points total.",
                records, ("minimum", "maximum"))


def price_with_tax(rng):
    percent = rng.randrange(16, 49) / 4
    rate = round(1 + percent / 100, 4)
    prices = [100.0, 19.99, 5.0] + money_amounts(rng, 7, 1, 500)
    return easy(rng, "price_with_tax", ["price"], f"price * {rate!r}",
                "Write me a function that gives the price a customer pays at the till, tax included.",
                "price", "dollars", f"The sales tax is {num(percent)} percent, so multiply the price by {rate!r}.",
                [(p,) for p in prices], MONEY_TWISTS)


def pizza_slices(rng):
    per_guest = rng.randint(2, 4)
    spare = rng.randint(1, 6)
    guests = [1, 12, 5] + [rng.randint(2, 40) for _ in range(7)]
    return easy(rng, "pizza_slices", ["guests"], f"guests * {per_guest} + {spare}",
                "I'm throwing a party. Write a function that says how many pizza slices to order.",
                "slice count", "slices", f"Plan {per_guest} slices per guest plus {spare} spare, for the slice count.",
                [(g,) for g in guests], ("minimum", "maximum"))


def water_liters(rng):
    ml_per_kg = rng.randint(25, 40)
    weights = [50, 80, 100] + [rng.randint(30, 130) for _ in range(7)]
    return easy(rng, "water_liters", ["weight_kg"], f"weight_kg * {ml_per_kg} / 1000",
                "Write a function that tells me how much water I should drink a day for my weight.",
                "water amount", "litres", f"The water amount is {ml_per_kg} millilitres per kilogram of body weight, given in litres.",
                [(w,) for w in weights], ("round", "minimum", "maximum"))


def fuel_cost(rng):
    per_100km = rng.choice([5, 5.5, 6, 6.5, 7, 7.5, 8, 9])
    price = rng.choice([1.45, 1.6, 1.75, 1.89, 1.95, 2.1])
    distances = [100, 250, 40] + [rng.randint(5, 900) for _ in range(7)]
    return easy(rng, "fuel_cost", ["km"], f"km / 100 * {per_100km!r} * {price!r}",
                "Write a function that tells me what a car trip costs in fuel.", "fuel cost", "dollars",
                f"The car's fuel consumption is {num(per_100km)} litres per 100 kilometres and fuel costs {dollars(price)} per litre.",
                [(d,) for d in distances], MONEY_TWISTS)


# ---------------------------------------------------------------- medium

def shipping_cost(rng):
    base = rng.choice([3, 4, 5, 6, 8])
    per_kg = rng.choice([1, 1.5, 2, 2.5, 3])
    heavy = rng.choice([10, 15, 20, 25])
    heavy_fee = rng.choice([5, 10, 15])
    express_rule = rng.choice(["double", "times", "flat"])
    if express_rule == "double":
        express_line, express_fact = "cost = cost * 2", "Express shipping doubles the whole cost."
    elif express_rule == "times":
        express_line, express_fact = "cost = cost * 1.5", "Express shipping multiplies the whole cost by 1.5."
    else:
        surcharge = rng.choice([5, 7.5, 12])
        express_line = f"cost = cost + {surcharge!r}"
        express_fact = f"Express shipping adds a flat {num(surcharge)} dollars to the cost."
    source = code("""
        def shipping_cost(weight_kg, express):
            cost = $base + $per_kg * weight_kg
            if weight_kg > $heavy:
                cost = cost + $heavy_fee
            if express:
                $express_line
            return round(cost, 2)
        """, base=base, per_kg=per_kg, heavy=heavy, heavy_fee=heavy_fee, express_line=Raw(express_line))
    facts = [f"Shipping starts at a base price of {base} dollars.",
             f"Add {dollars(per_kg)} per kilogram of weight.",
             f"Parcels heavier than {heavy} kg pay an extra handling fee of {heavy_fee} dollars; "
             f"exactly {heavy} kg does not.",
             express_fact,
             "Round the cost to 2 decimal places."]
    weights = [1, heavy, heavy + 0.5, 0.5, heavy + 10] + [rng.randint(1, 80) / 2 for _ in range(5)]
    express = [False, False, False, True, True, rng.random() < 0.5, True, False, True, rng.random() < 0.5]
    return Variant(ask("I need a function that computes the shipping cost for parcels in my "
                       "online shop; customers can choose express.", source),
                   source, facts, list(zip(weights, express)))


def letter_grade(rng):
    top = rng.choice([85, 88, 90, 92, 93, 95])
    gap = rng.choice([5, 7, 8, 10])
    b, c, d = top - gap, top - 2 * gap, top - 3 * gap
    has_d = rng.random() < 0.5
    d_lines = f"\n    if score >= {d}:\n        return \"D\"" if has_d else ""
    source = code("""
        def letter_grade(score):
            if score >= $top:
                return "A"
            if score >= $b:
                return "B"
            if score >= $c:
                return "C"$d_lines
            return "F"
        """, top=top, b=b, c=c, d_lines=Raw(d_lines))
    facts = [f"A score of {top} or more is an A.",
             f"A score of {b} up to below {top} is a B.",
             f"A score of {c} up to below {b} is a C."]
    if has_d:
        facts += [f"A score of {d} up to below {c} is a D.", f"Anything below {d} is an F."]
    else:
        facts += [f"There is no D grade: anything below {c} is an F."]
    scores = [top, top - 1, b, b - 1, c, c - 1, d, d - 1, 100, rng.randint(0, d - 2)]
    return Variant(ask("Can you write a function that turns a test score into a letter grade "
                       "for my class? My cutoffs are a bit unusual.", source),
                   source, facts, [(s,) for s in scores])


def parking_fee(rng):
    free = rng.choice([10, 15, 20, 30, 45])
    rate = rng.choice([1.5, 2, 2.5, 3, 4, 5])
    cap = rate * rng.choice([4, 5, 6, 8])
    source = code("""
        import math


        def parking_fee(minutes):
            if minutes <= $free:
                return 0
            hours = math.ceil(minutes / 60)
            return min(hours * $rate, $cap)
        """, free=free, rate=rate, cap=cap)
    facts = [f"The first {free} minutes of parking are free.",
             f"After the free period, every started hour costs {num(rate)} dollars, counting "
             "the hours from arrival (so 61 minutes is two hours).",
             f"The fee is capped at {num(cap)} dollars per visit."]
    minutes = [0, free, free + 1, 60, 61, 125, 1000, rng.randint(121, 600),
               rng.randint(free + 1, 59), rng.randint(181, 300)]
    return Variant(ask("I run a small parking lot. Write a function that computes what a "
                       "driver pays from how many minutes they stayed.", source),
                   source, facts, [(m,) for m in minutes])


def library_fine(rng):
    rates = {"book": rng.choice([0.1, 0.15, 0.2, 0.25]),
             "dvd": rng.choice([0.5, 1, 1.5]),
             "magazine": rng.choice([0.05, 0.1])}
    grace = rng.choice([1, 2, 3])
    cap = rng.choice([5, 8, 10, 15, 20])
    source = code("""
        def library_fine(days_late, item):
            daily = $rates[item]
            days = days_late - $grace
            if days <= 0:
                return 0
            return round(min(days * daily, $cap), 2)
        """, rates=rates, grace=grace, cap=cap)
    facts = [f"Books are fined {dollars(rates['book'])} per day late.",
             f"DVDs are fined {dollars(rates['dvd'])} per day late.",
             f"Magazines are fined {dollars(rates['magazine'])} per day late.",
             f"There is a grace period of {plural(grace, 'day')}: only the days late after "
             "the grace period are charged.",
             f"The fine never goes above {cap} dollars.",
             "Round the fine to 2 decimal places."]
    cases = [(grace, "book"), (grace + 1, "book"), (0, "dvd"), (grace + 3, "dvd"),
             (grace + 5, "magazine"), (200, "book"), (200, "dvd"), (500, "magazine"),
             (rng.randint(4, 30), "book"), (rng.randint(4, 12), "dvd")]
    return Variant(ask("Our library wants a function for overdue fines. An item is a "
                       "'book', a 'dvd' or a 'magazine'.", source), source, facts, cases)


PASSWORD_LABELS = [("weak", "medium", "strong"), ("Weak", "Medium", "Strong"),
                   ("low", "medium", "high"), ("poor", "fair", "good"), ("red", "amber", "green")]


def password_strength(rng):
    min_length = rng.randint(8, 12)
    weak, medium, strong = rng.choice(PASSWORD_LABELS)
    symbols_count = rng.random() < 0.5
    strong_at = rng.choice([3, 4]) if symbols_count else 3
    symbol_lines = ("\n    if any(not ch.isalnum() for ch in password):\n        score += 1"
                    if symbols_count else "")
    source = code("""
        def password_strength(password):
            score = 0
            if len(password) >= $min_length:
                score += 1
            if any(ch.isdigit() for ch in password):
                score += 1
            if any(ch.isupper() for ch in password):
                score += 1$symbol_lines
            if score >= $strong_at:
                return $strong
            if score >= 2:
                return $medium
            return $weak
        """, min_length=min_length, symbol_lines=Raw(symbol_lines), strong_at=strong_at,
                  strong=strong, medium=medium, weak=weak)
    facts = [f"A password gets one point for being at least {min_length} characters long.",
             "It gets one point for containing a digit.",
             "It gets one point for containing an uppercase letter."]
    facts.append("It gets one point for containing a symbol, anything that is not a letter or digit."
                 if symbols_count else "Symbols do not count for anything.")
    middle = "2 or 3 points" if strong_at == 4 else "exactly 2 points"
    facts += [f"With {strong_at} or more points the rating is '{strong}'.",
              f"With {middle} the rating is '{medium}'.",
              f"With fewer than 2 points the rating is '{weak}'."]
    filler = "abcdefghijklmnop"
    passwords = ["abc", filler[:min_length], "Ab1" + filler[:min_length - 4],
                 "Ab1" + filler[:min_length - 3], "Ab1!" + filler[:min_length - 4],
                 "ab1!", "A" * min_length, "abc123", "Passw0rd!" + filler[:3], "a!" + filler[:min_length]]
    return Variant(ask("Write a function that rates how secure a password is, so I can show "
                       "it on our sign-up page.", source), source, facts, [(p,) for p in passwords])


def income_tax(rng):
    free = rng.choice([10000, 12000, 12500, 15000])
    upper = free + rng.choice([20000, 30000, 40000])
    low_percent = rng.choice([10, 15, 20])
    high_percent = rng.choice([25, 30, 35, 40])
    source = code("""
        def income_tax(income):
            tax = 0
            if income > $free:
                tax += (min(income, $upper) - $free) * $low_rate
            if income > $upper:
                tax += (income - $upper) * $high_rate
            return round(tax, 2)
        """, free=free, upper=upper, low_rate=low_percent / 100, high_rate=high_percent / 100)
    facts = [f"The first {free} dollars of income are not taxed.",
             f"Income between {free} and {upper} dollars is taxed at {low_percent} percent.",
             f"Income above {upper} dollars is taxed at {high_percent} percent.",
             "Only the part of the income inside each bracket is taxed at that bracket's rate.",
             "Round the tax to 2 decimal places."]
    incomes = [0, free, free + 1000, upper, upper + 5000, 250000,
               rng.randint(free, upper), rng.randint(upper, 200000), rng.randint(0, free),
               round(rng.uniform(free, 150000), 2)]
    return Variant(ask("Could you write a function that works out the income tax someone "
                       "owes in our little country?", source), source, facts, [(i,) for i in incomes])


def overtime_pay(rng):
    limit = rng.choice([35, 36, 37.5, 38, 40, 42, 44, 45])
    multiplier = rng.choice([1.25, 1.5, 2])
    source = code("""
        def overtime_pay(hours, rate):
            regular = min(hours, $limit)
            overtime = max(hours - $limit, 0)
            return round(regular * rate + overtime * rate * $multiplier, 2)
        """, limit=limit, multiplier=multiplier)
    facts = [f"The first {num(limit)} hours of the week are paid at the normal rate.",
             f"Overtime hours beyond {num(limit)} are paid at {num(multiplier)} times the rate.",
             "Round the pay to 2 decimal places."]
    cases = [(limit, 20), (limit + 1, 20), (0, 15), (limit + 10, 18.5), (limit - 5, 22),
             (60, 30)] + [(rng.randint(20, 70), rng.choice([12, 15.5, 19.75, 25, 32])) for _ in range(4)]
    return Variant(ask("I need a function to compute an employee's weekly pay from hours "
                       "worked and hourly rate, overtime included.", source), source, facts, cases)


def checkout_total(rng):
    low = rng.choice([50, 75, 100])
    high = low * rng.choice([2, 3])
    low_percent = rng.choice([5, 10])
    high_percent = low_percent + rng.choice([5, 10])
    member_percent = rng.choice([5, 10, 15])
    source = code("""
        def checkout_total(subtotal, is_member):
            if subtotal >= $high:
                discount = $high_rate
            elif subtotal >= $low:
                discount = $low_rate
            else:
                discount = 0
            total = subtotal * (1 - discount)
            if is_member:
                total = total * (1 - $member_rate)
            return round(total, 2)
        """, high=high, low=low, high_rate=high_percent / 100, low_rate=low_percent / 100,
                  member_rate=member_percent / 100)
    facts = [f"Orders of {low} dollars or more get a {low_percent} percent discount.",
             f"Orders of {high} dollars or more get a {high_percent} percent discount instead.",
             f"Members get an extra {member_percent} percent off, applied after the order discount.",
             "Round the total to 2 decimal places."]
    cases = [(low, False), (low - 0.01, False), (high, False), (high, True), (20, True),
             (low + 10, True)] + [(round(rng.uniform(5, high * 1.5), 2), rng.random() < 0.5) for _ in range(4)]
    return Variant(ask("Write the function that computes the final total at checkout in my "
                       "shop; members and big orders get discounts.", source), source, facts, cases)


def normalize_username(rng):
    separator = rng.choice(["_", ".", "-", ""])
    max_length = rng.randint(8, 16)
    lowercase = rng.random() < 0.5
    source = code("""
        def normalize_username(name):
            words = name$lower.split()
            joined = $separator.join(words)
            kept = "".join(ch for ch in joined if ch.isalnum() or ch in $separator)
            return kept[:$max_length]
        """, lower=Raw(".lower()" if lowercase else ""), separator=separator, max_length=max_length)
    facts = ["Usernames are all lowercase." if lowercase
             else "Keep upper and lower case letters exactly as typed.",
             f"Words are joined with '{separator}' between them." if separator
             else "Words are joined with nothing between them.",
             "Extra spaces at the ends or between words are ignored.",
             "Drop every character that is not a letter or a digit"
             + (f", except the joining '{separator}'." if separator else "."),
             f"Cut the username to at most {max_length} characters."]
    names = ["  John Smith ", "Mary-Jane O'Neil", "Dr. Alice  Wonderland-Smith", "bob",
             "Xavier Alexander Montgomery", "anna.maria lopez", "R2 D2", "ZOE", "Li Wei 99",
             "Jean-Luc   Picard!!"]
    return Variant(ask("Can you write a function that turns a person's full name into a "
                       "username for our system?", source), source, facts, [(n,) for n in names])


def hot_days(rng):
    threshold = rng.randint(25, 35)
    inclusive = rng.random() < 0.5
    as_percent = rng.random() < 0.5
    compare = ">=" if inclusive else ">"
    if as_percent:
        body = ("if not temps:\n        return 0\n"
                f"    hot = sum(1 for t in temps if t {compare} {threshold})\n"
                "    return round(100 * hot / len(temps))")
    else:
        body = f"return sum(1 for t in temps if t {compare} {threshold})"
    source = code("""
        def hot_days(temps):
            $body
        """, body=Raw(body))
    facts = [f"A day is hot when its temperature is {threshold} degrees or more." if inclusive
             else f"A day is hot only when its temperature is above {threshold} degrees; "
                  f"exactly {threshold} does not count.",
             "Return the percentage of hot days, rounded to a whole number; an empty list gives 0."
             if as_percent else "Return the number of hot days."]
    lists = [[], [threshold], [threshold - 1, threshold, threshold + 1],
             [20, 22, 19], [40, 41, 38, 36]]
    for _ in range(5):
        lists.append([rng.randint(threshold - 6, threshold + 6) for _ in range(rng.randint(3, 9))])
    return Variant(ask("I log the daily high temperatures in my town. Write a function that "
                       "summarizes how hot the period was.", source), source, facts, [(l,) for l in lists])


def electricity_bill(rng):
    fixed = rng.choice([5, 8, 10, 12.5, 15])
    tier = rng.choice([100, 200, 250, 300, 500])
    low_rate = rng.choice([0.1, 0.12, 0.15])
    high_rate = round(low_rate + rng.choice([0.05, 0.08, 0.1]), 2)
    source = code("""
        def electricity_bill(kwh):
            first = min(kwh, $tier)
            rest = max(kwh - $tier, 0)
            return round($fixed + first * $low_rate + rest * $high_rate, 2)
        """, tier=tier, fixed=fixed, low_rate=low_rate, high_rate=high_rate)
    facts = [f"Every bill has a fixed monthly charge of {num(fixed)} dollars.",
             f"The first {tier} kWh cost {low_rate} dollars per kWh.",
             f"Every kWh above {tier} costs {high_rate} dollars.",
             "Round the bill to 2 decimal places."]
    usage = [0, tier, tier + 1, 1000, tier // 2] + [rng.randint(1, 1200) for _ in range(5)]
    return Variant(ask("Please write a function that computes our monthly electricity bill "
                       "from the kWh used.", source), source, facts, [(u,) for u in usage])


HEART_LIMITS = [[50, 60, 70, 80, 90], [55, 65, 75, 85, 95], [60, 70, 80, 90]]


def heart_rate_zone(rng):
    max_base = rng.choice([220, 210, 205])
    limits = rng.choice(HEART_LIMITS)
    as_text = rng.random() < 0.5
    source = code("""
        def heart_rate_zone(bpm, age):
            percent = 100 * bpm / ($max_base - age)
            zone = 0
            for limit in $limits:
                if percent >= limit:
                    zone += 1
            return $result
        """, max_base=max_base, limits=limits, result=Raw('f"Zone {zone}"' if as_text else "zone"))
    facts = [f"The maximum heart rate is {max_base} minus the age.",
             "Work with the heart rate as a percentage of the maximum heart rate.",
             f"The zone boundaries are at {', '.join(map(str, limits))} percent; each boundary "
             "reached (at or above) adds one to the zone number, so below the first it is zone 0.",
             "Return the text 'Zone N', for example 'Zone 3'." if as_text
             else "Return the zone as a plain whole number."]
    cases = []
    for limit in limits[:3]:
        age = rng.randint(20, 60)
        exact = (max_base - age) * limit / 100
        cases.append((int(exact) + 1, age))
    cases += [(60, 30), (200, 25), (max_base - 40, 40)]
    cases += [(rng.randint(80, 190), rng.randint(18, 70)) for _ in range(10 - len(cases))]
    return Variant(ask("For my running watch app, write a function that tells me which "
                       "training intensity level I'm in from my pulse and age.", source),
                   source, facts, cases)


def loyalty_points(rng):
    per_dollar = rng.choice([1, 2, 5, 10])
    bonus_at = rng.choice([50, 75, 100])
    bonus = rng.choice([10, 20, 25, 50])
    source = code("""
        def loyalty_points(purchases):
            points = 0
            for amount in purchases:
                points += int(amount * $per_dollar)
                if amount >= $bonus_at:
                    points += $bonus
            return points
        """, per_dollar=per_dollar, bonus_at=bonus_at, bonus=bonus)
    facts = [f"Each purchase earns {plural(per_dollar, 'point')} per dollar spent.",
             "Points are rounded down for each purchase separately.",
             f"A single purchase of {bonus_at} dollars or more earns a bonus of {bonus} points."]
    baskets = [[], [bonus_at], [bonus_at - 0.5], [9.99, 0.5], [120.4, 3.75, 60]]
    for _ in range(5):
        baskets.append(money_amounts(rng, rng.randint(1, 5), 1, 150))
    return Variant(ask("Our café has a loyalty card. Write a function that counts the points "
                       "a customer earns for a list of purchases.", source),
                   source, facts, [(b,) for b in baskets])


# ---------------------------------------------------------------- hard

def format_duration(rng):
    style = rng.choice(["clock", "padded", "letters", "letters_padded", "words"])
    hide_zero_hours = rng.random() < 0.5
    round_seconds = rng.random() < 0.5
    with_hours, without_hours = {
        "clock": ('f"{hours}:{minutes:02d}:{secs:02d}"', 'f"{minutes}:{secs:02d}"'),
        "padded": ('f"{hours:02d}:{minutes:02d}:{secs:02d}"', 'f"{minutes:02d}:{secs:02d}"'),
        "letters": ('f"{hours}h {minutes}m {secs}s"', 'f"{minutes}m {secs}s"'),
        "letters_padded": ('f"{hours}h {minutes:02d}m {secs:02d}s"', 'f"{minutes:02d}m {secs:02d}s"'),
        "words": ('f"{hours} hr {minutes} min {secs} sec"', 'f"{minutes} min {secs} sec"'),
    }[style]
    short = f"\n    if hours == 0:\n        return {without_hours}" if hide_zero_hours else ""
    source = code("""
        def format_duration(seconds):
            total = $to_int(seconds)
            hours, rest = divmod(total, 3600)
            minutes, secs = divmod(rest, 60)$short
            return $full
        """, to_int=Raw("round" if round_seconds else "int"), short=Raw(short), full=Raw(with_hours))
    example = {"clock": "1:05:09", "padded": "01:05:09", "letters": "1h 5m 9s",
               "letters_padded": "1h 05m 09s", "words": "1 hr 5 min 9 sec"}[style]
    short_example = {"clock": "5:09", "padded": "05:09", "letters": "5m 9s",
                     "letters_padded": "05m 09s", "words": "5 min 9 sec"}[style]
    facts = [f"The format looks like '{example}' for 1 hour, 5 minutes and 9 seconds.",
             f"When there are no full hours, leave the hours out, like '{short_example}'."
             if hide_zero_hours else "Always show the hours, even when they are zero.",
             "Fractions of a second are rounded to the nearest second." if round_seconds
             else "Fractions of a second are dropped (rounded down)."]
    durations = [3909, 309, 0, 59.7, 3600, 86399, 7260.2, rng.randint(60, 3599),
                 rng.randint(3600, 40000), rng.randint(100, 5000) + 0.37]
    return Variant(ask("I need a function that turns a number of seconds into a readable "
                       "duration string for my workout log.", source),
                   source, facts, [(d,) for d in durations])


def scale_recipe(rng):
    base_servings = rng.randint(2, 6)
    step = rng.choice([5, 10, 25])
    drop_zero = rng.random() < 0.5
    store = ("if amount > 0:\n            scaled[name] = amount" if drop_zero
             else "scaled[name] = amount")
    source = code("""
        def scale_recipe(ingredients, servings):
            scaled = {}
            for name, grams in ingredients.items():
                amount = int(grams * servings / $base_servings / $step + 0.5) * $step
                $store
            return scaled
        """, base_servings=base_servings, step=step, store=Raw(store))
    facts = [f"The amounts in my recipes are written for {base_servings} servings.",
             f"Round every scaled amount to the nearest {step} grams, halves rounding up.",
             "Leave out an ingredient whose scaled amount rounds to zero." if drop_zero
             else "Keep every ingredient, even when its scaled amount rounds to zero."]
    recipes = [{"flour": 500, "sugar": 200, "salt": 5},
               {"rice": 300, "butter": 30, "pepper": 2},
               {"oats": 120, "milk": 400, "honey": 15, "cinnamon": 3}]
    cases = [(recipes[0], base_servings), (recipes[0], 1), (recipes[1], 8), (recipes[2], 2),
             (recipes[2], 1), (recipes[1], base_servings * 3), ({"pasta": 250}, 3)]
    cases += [(rng.choice(recipes), rng.randint(1, 12)) for _ in range(3)]
    return Variant(ask("Can you write a function that scales one of my recipes (ingredient "
                       "to grams) to a different number of servings?", source), source, facts, cases)


def longest_streak(rng):
    goal = rng.randrange(5000, 12001, 500)
    inclusive = rng.random() < 0.5
    source = code("""
        def longest_streak(steps):
            best = current = 0
            for count in steps:
                if count $compare $goal:
                    current += 1
                    best = max(best, current)
                else:
                    current = 0
            return best
        """, compare=Raw(">=" if inclusive else ">"), goal=goal)
    facts = [f"The daily step goal is {goal} steps.",
             f"A day meets the goal with exactly {goal} steps." if inclusive
             else f"A day meets the goal only with more than {goal} steps; exactly {goal} is not enough.",
             "Return the length of the longest run of consecutive days that meet the goal."]
    lists = [[], [goal], [goal, goal + 1, goal - 1, goal + 2, goal + 3],
             [goal - 100] * 3, [goal + 1, goal, goal + 1, goal + 1]]
    for _ in range(5):
        lists.append([rng.randrange(goal - 3000, goal + 3000, 500) for _ in range(rng.randint(4, 10))])
    return Variant(ask("My fitness tracker gives me a list of daily step counts. Write a "
                       "function that finds my best streak.", source), source, facts, [(l,) for l in lists])


def top_scorer(rng):
    tie_rule = rng.choice(["first_alpha", "last_alpha", "first_listed"])
    output = rng.choice(["name", "pair", "text"])
    empty = rng.choice(["nobody", "no one", "N/A"])
    source = code("""
        def top_scorer(scores):
            if not scores:
                return $empty
            best = max(scores.values())
            leaders = [name for name in scores if scores[name] == best]
            winner = $pick
            return $result
        """, empty=empty,
                  pick=Raw({"first_alpha": "min(leaders)", "last_alpha": "max(leaders)",
                            "first_listed": "leaders[0]"}[tie_rule]),
                  result=Raw({"name": "winner", "pair": "(winner, best)",
                              "text": 'f"{winner} ({best})"'}[output]))
    facts = ["The winner is the player with the highest score.",
             {"first_alpha": "On a tie, the name that comes first alphabetically wins.",
              "last_alpha": "On a tie, the name that comes last alphabetically wins.",
              "first_listed": "On a tie, the player listed first in the dict wins."}[tie_rule],
             {"name": "Return just the winner's name.",
              "pair": "Return a tuple of the winner's name and the score, in that order.",
              "text": "Return a string like 'Ann (12)': the name, a space, and the score in parentheses."}[output],
             f"With no players at all, return '{empty}'."]
    cases = [{"Maya": 7, "Ben": 9, "Zoe": 9}, {"Sam": 3}, {}, {"Zed": 5, "Amy": 5, "Kim": 5},
             {"Ola": 12, "Eve": 4}, {"Tom": 0, "Ann": 0}]
    names = ["Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal"]
    for _ in range(4):
        chosen = rng.sample(names, rng.randint(2, 5))
        cases.append({name: rng.randint(0, 6) for name in chosen})
    return Variant(ask("Write a function that picks the winner of our game night from a dict "
                       "of player names to scores.", source), source, facts, [(c,) for c in cases])


def restock_list(rng):
    threshold = rng.randint(3, 10)
    inclusive = rng.random() < 0.5
    by_count = rng.random() < 0.5
    source = code("""
        def restock_list(stock):
            low = [item for item, count in stock.items() if count $compare $threshold]
            return $order
        """, compare=Raw("<=" if inclusive else "<"), threshold=threshold,
                  order=Raw("sorted(low, key=lambda item: (stock[item], item))" if by_count else "sorted(low)"))
    facts = [f"An item needs restocking when {threshold} or fewer are left." if inclusive
             else f"An item needs restocking when fewer than {threshold} are left.",
             "List the items with the lowest count first; equal counts go in alphabetical order."
             if by_count else "List the items in alphabetical order.",
             "Return a list of item names; an empty list when nothing is low."]
    items = ["apples", "bread", "cheese", "eggs", "flour", "jam", "milk", "tea"]
    cases = [{"milk": threshold, "eggs": threshold - 1, "tea": threshold + 1},
             {"jam": 0, "bread": threshold - 1, "apples": 1}, {}, {"cheese": 100},
             {"tea": 1, "flour": 1, "milk": 0}]
    for _ in range(5):
        chosen = rng.sample(items, rng.randint(3, 7))
        cases.append({item: rng.randint(0, threshold + 3) for item in chosen})
    return Variant(ask("Write a function that looks at my pantry stock (item to count) and "
                       "tells me what to buy.", source), source, facts, [(c,) for c in cases])


def score_summary(rng):
    order = rng.sample(["average", "lowest", "highest"], 3)
    digits = rng.choice([1, 2])
    drop_lowest = rng.random() < 0.5
    source = code("""
        def score_summary(scores):
            average = round($mean, $digits)
            lowest, highest = min(scores), max(scores)
            return ($first, $second, $third)
        """, mean=Raw("sum(sorted(scores)[1:]) / (len(scores) - 1)" if drop_lowest
                           else "sum(scores) / len(scores)"), digits=digits,
                  first=Raw(order[0]), second=Raw(order[1]), third=Raw(order[2]))
    facts = [f"Return a tuple in this order: the {order[0]} score, the {order[1]} score, "
             f"then the {order[2]} score.",
             f"Round the average to {plural(digits, 'decimal place')}.",
             "The single lowest score is left out when computing the average, but it is still "
             "reported as the lowest." if drop_lowest else "The average uses every score."]
    lists = [[80, 90, 100], [70, 70], [55, 91, 78, 64], [100, 0, 50], [88.5, 92.25, 79]]
    for _ in range(5):
        lists.append([rng.randint(40, 100) for _ in range(rng.randint(2, 7))])
    return Variant(ask("I grade quizzes and want a quick summary of a student's scores. Can "
                       "you write that function?", source), source, facts, [(l,) for l in lists])


def split_bill(rng):
    tip_percent = rng.choice([0, 5, 10, 12, 15, 18, 20, 22, 25])
    leftover = rng.choice(["first", "last", "one"])
    give = {"first": "for i in range(leftover):\n        shares[i] += 1",
            "last": "for i in range(leftover):\n        shares[-1 - i] += 1",
            "one": "shares[0] += leftover"}[leftover]
    source = code("""
        def split_bill(total, people):
            cents = round($cents)
            share, leftover = divmod(cents, people)
            shares = [share] * people
            $give
            return [c / 100 for c in shares]
        """, cents=Raw(f"total * {round(1 + tip_percent / 100, 2)} * 100" if tip_percent else "total * 100"),
                  give=Raw(give))
    facts = [f"Add a {tip_percent} percent tip to the total before splitting." if tip_percent
             else "No tip is added; split the total as it is.",
             "Work in whole cents and return each person's share in dollars as a list.",
             {"first": "Leftover cents that don't divide evenly go one each to the first people in the list.",
              "last": "Leftover cents that don't divide evenly go one each to the last people in the list.",
              "one": "All leftover cents that don't divide evenly go to the first person."}[leftover]]
    cases = [(100, 3), (10, 4), (0.05, 2), (50, 1), (99.99, 6)]
    cases += [(round(rng.uniform(10, 300), 2), rng.randint(2, 7)) for _ in range(5)]
    return Variant(ask("Write a function that splits a restaurant bill between friends.",
                       source), source, facts, cases)


def top_words(rng):
    k = rng.randint(2, 4)
    min_length = rng.randint(2, 5)
    with_counts = rng.random() < 0.5
    source = code("""
        def top_words(text):
            counts = {}
            for raw in text.lower().split():
                word = raw.strip(".,!?;:'\\"")
                if len(word) >= $min_length:
                    counts[word] = counts.get(word, 0) + 1
            ranked = sorted(counts, key=lambda w: (-counts[w], w))
            return $result
        """, min_length=min_length,
                  result=Raw(f"[(w, counts[w]) for w in ranked[:{k}]]" if with_counts else f"ranked[:{k}]"))
    facts = ["Upper and lower case count as the same word.",
             "Punctuation (. , ! ? ; : and quotes) is stripped from the ends of words.",
             f"Ignore words shorter than {min_length} letters.",
             f"Return the {k} most frequent words.",
             "Ties in frequency are broken alphabetically.",
             "Return a list of (word, count) tuples." if with_counts else "Return a list of just the words."]
    vocabulary = ["a", "an", "the", "cat", "dog", "sat", "on", "mat", "big", "red", "apple",
                  "green", "river", "stone", "is", "it"]
    texts = ["The cat sat on the mat. The dog sat too!", "Apple, apple; river? RIVER stone.",
             "a a a an an it", "Big red dog, big red cat, big green apple."]
    for _ in range(6):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(6, 16))]
        texts.append(" ".join(w.capitalize() if rng.random() < 0.2 else w for w in words) + ".")
    return Variant(ask("Write a function that finds the most common words in a piece of text "
                       "for my blog's tag cloud.", source), source, facts, [(t,) for t in texts])


def payroll(rng):
    limit = rng.choice([38, 40, 45])
    multiplier = rng.choice([1.5, 2])
    withholding = rng.choice([5, 10, 15, 20])
    source = code("""
        def payroll(employees):
            pay = {}
            for person in employees:
                hours, rate = person["hours"], person["rate"]
                gross = min(hours, $limit) * rate + max(hours - $limit, 0) * rate * $multiplier
                pay[person["name"]] = round(gross * (1 - $withholding_rate), 2)
            return pay
        """, limit=limit, multiplier=multiplier, withholding_rate=withholding / 100)
    facts = [f"Hours up to {limit} a week are paid at the normal rate.",
             f"Overtime hours beyond {limit} are paid at {num(multiplier)} times the rate.",
             f"Withhold {withholding} percent of the gross pay for tax; return the net pay.",
             "Return a dict from each employee's name to the net pay, rounded to 2 decimal places."]
    staff = ["Ana", "Ben", "Chen", "Dana", "Eko"]
    cases = [[{"name": "Ana", "hours": limit, "rate": 20}],
             [{"name": "Ben", "hours": limit + 5, "rate": 16.5}],
             [{"name": "Chen", "hours": 0, "rate": 30}, {"name": "Dana", "hours": 10, "rate": 12}]]
    for _ in range(7):
        chosen = rng.sample(staff, rng.randint(1, 4))
        cases.append([{"name": name, "hours": rng.randint(5, 60), "rate": rng.choice([12, 14.5, 18, 22.25, 31])}
                      for name in chosen])
    return Variant(ask("Can you write the weekly payroll function for my small team? Each "
                       "employee is a dict with name, hours and rate.", source),
                   source, facts, [(c,) for c in cases])


SMALL_WORDS = ["a", "an", "the", "of", "and", "in", "on", "to", "for", "at", "by", "or", "but"]


def title_case(rng):
    small = sorted(rng.sample(SMALL_WORDS, rng.randint(3, 7)))
    capitalize_last = rng.random() < 0.5
    condition = "i == 0 or i == len(words) - 1" if capitalize_last else "i == 0"
    source = code("""
        def title_case(title):
            words = title.lower().split()
            result = []
            for i, word in enumerate(words):
                if $condition or word not in $small:
                    result.append(word.capitalize())
                else:
                    result.append(word)
            return " ".join(result)
        """, condition=Raw(condition), small=tuple(small))
    facts = ["Each word starts with a capital letter and the rest of it is lowercase.",
             f"These small words stay all lowercase: {', '.join(small)}.",
             "The first word is always capitalized, even a small word.",
             "The last word is always capitalized too, even a small word." if capitalize_last
             else "The last word follows the same rule as the others.",
             "Any extra spaces between words become single spaces."]
    titles = ["the lord of the rings", "A TALE OF TWO CITIES", "war and peace",
              "what the wind blew in", "gone  with the wind", "of mice and men",
              "to kill a mockingbird", "the cat in the hat", "ready or not", "a room of one's own"]
    return Variant(ask("I'm cleaning up book titles for my reading list. Write a function that "
                       "puts a title in proper title case, the way I like it.", source),
                   source, facts, [(t,) for t in titles])


# ---------------------------------------------------------------- test-only, medium and hard

def format_phone(rng):
    style, example = rng.choice([('f"({digits[:3]}) {digits[3:6]}-{digits[6:]}"', "(555) 123-4567"),
                                 ('f"{digits[:3]}-{digits[3:6]}-{digits[6:]}"', "555-123-4567"),
                                 ('f"{digits[:3]}.{digits[3:6]}.{digits[6:]}"', "555.123.4567"),
                                 ('f"{digits[:3]} {digits[3:6]} {digits[6:]}"', "555 123 4567")])
    invalid = rng.choice(["invalid", "Invalid number", "ERROR"])
    country_code = rng.random() < 0.5
    drop_one = ('\n    if len(digits) == 11 and digits[0] == "1":\n        digits = digits[1:]'
                if country_code else "")
    source = code("""
        def format_phone(number):
            digits = "".join(ch for ch in number if ch.isdigit())$drop_one
            if len(digits) != 10:
                return $invalid
            return $style
        """, drop_one=Raw(drop_one), invalid=invalid, style=Raw(style))
    facts = ["Ignore everything in the input that is not a digit.",
             f"Ten digits are formatted like '{example}'.",
             "An 11-digit number starting with 1 (the country code) drops the 1 and is then "
             "formatted." if country_code else "Only exactly ten digits are accepted; a leading "
             "country code makes the number wrong.",
             f"Any other number of digits returns '{invalid}'."]
    numbers = ["5551234567", "(555) 123-4567", "555.987.6543", "1-555-222-3333", "12345",
               "+1 (800) 555 0199", "555-0123", "", "44 20 7946 0958", "212 555 01 23"]
    return Variant(ask("I'd like a function that cleans up phone numbers people type into a "
                       "form and writes them all the same way.", source),
                   source, facts, [(n,) for n in numbers])


def mask_card(rng):
    keep = rng.choice([4, 3, 2])
    mask = rng.choice(["*", "#", "X"])
    grouped = rng.random() < 0.5
    result = ('" ".join(masked[i:i + 4] for i in range(0, len(masked), 4))' if grouped else "masked")
    source = code("""
        def mask_card(number):
            digits = "".join(ch for ch in number if ch.isdigit())
            masked = $mask * (len(digits) - $keep) + digits[-$keep:]
            return $result
        """, mask=mask, keep=keep, result=Raw(result))
    facts = ["Ignore spaces and dashes in the card number.",
             f"Show only the last {keep} digits.",
             f"Replace every other digit with '{mask}'.",
             "Split the result into groups of 4 characters separated by spaces, counting from "
             "the left." if grouped else "Return the masked digits as one string without spaces."]
    numbers = ["4111 1111 1111 1111", "5500-0000-0000-0004", "340000000000009", "1234567890123456",
               "6011 0009 9013 9424", "30569309025904", "4000 0566 5566 5556", "12345678",
               "3530-1113-3330-0000", "5105105105105100"]
    return Variant(ask("Write a function that hides a credit card number for our receipts.",
                       source), source, facts, [(n,) for n in numbers])


SLEEP_LABELS = [("rested", "okay", "tired"), ("good", "fair", "poor"), ("great", "ok", "bad")]


def sleep_report(rng):
    good_at = rng.choice([7, 7.5, 8])
    poor_below = rng.choice([5, 5.5, 6])
    best, middle, worst = rng.choice(SLEEP_LABELS)
    label_first = rng.random() < 0.5
    source = code("""
        def sleep_report(hours):
            average = round(sum(hours) / len(hours), 1)
            if average >= $good_at:
                label = $best
            elif average >= $poor_below:
                label = $middle
            else:
                label = $worst
            return $result
        """, good_at=good_at, poor_below=poor_below, best=best, middle=middle, worst=worst,
                  result=Raw("(label, average)" if label_first else "(average, label)"))
    facts = ["Use the average hours per night, rounded to 1 decimal place.",
             f"An average of {num(good_at)} hours or more is '{best}'.",
             f"An average from {num(poor_below)} up to below {num(good_at)} hours is '{middle}'.",
             f"An average below {num(poor_below)} hours is '{worst}'.",
             "Return a tuple of the label and the average, in that order." if label_first
             else "Return a tuple of the average and the label, in that order."]
    weeks = [[good_at] * 3, [poor_below] * 2, [poor_below - 0.5, poor_below - 0.5], [9, 8, 10],
             [4, 5, 4.5, 6]]
    for _ in range(5):
        weeks.append([rng.randint(8, 20) / 2 for _ in range(7)])
    return Variant(ask("Can you write a function that looks at a week of my nightly sleep "
                       "and tells me how I'm doing?", source), source, facts, [(w,) for w in weeks])


def format_money(rng):
    symbol = rng.choice(["$", "€", "£"])
    separator = rng.choice([",", " ", "'"])
    decimals = rng.choice([0, 2])
    parentheses = rng.random() < 0.5
    negative = 'f"({symbol}{text})"' if parentheses else 'f"-{symbol}{text}"'
    source = code("""
        def format_money(amount):
            symbol = $symbol
            text = f"{abs(amount):,.$decimals}".replace(",", $separator)
            if amount < 0:
                return $negative
            return f"{symbol}{text}"
        """, symbol=symbol, decimals=Raw(f"{decimals}f"), separator=separator, negative=Raw(negative))
    facts = [f"Put the currency symbol '{symbol}' in front of the number.",
             f"Group thousands with '{separator}'." if separator != " " else "Group thousands with a space.",
             f"Show {plural(decimals, 'decimal place')}." if decimals else "Show no decimals: round to whole units.",
             "Negative amounts are shown in parentheses, like (symbol and number)." if parentheses
             else "Negative amounts get a minus sign before the symbol."]
    amounts = [1234.5, -42, 0, 1000000, 999.99, -1234567.891, 7.25]
    amounts += [round(rng.uniform(-5000, 90000), 2) for _ in range(3)]
    return Variant(ask("I need a function that formats amounts of money for the reports of "
                       "my accounting app.", source), source, facts, [(a,) for a in amounts])


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def normalize_date(rng):
    style = rng.choice(["dmy", "mdy", "dotted", "month_first", "day_first"])
    abbreviate = rng.random() < 0.5
    months = [m[:3] for m in MONTHS] if abbreviate else MONTHS
    result = {"dmy": 'f"{day:02d}/{month:02d}/{year}"', "mdy": 'f"{month:02d}/{day:02d}/{year}"',
              "dotted": 'f"{day:02d}.{month:02d}.{year}"',
              "month_first": 'f"{names[month - 1]} {day}, {year}"',
              "day_first": 'f"{day} {names[month - 1]} {year}"'}[style]
    names_line = f"\n    names = {months!r}" if style in ("month_first", "day_first") else ""
    source = code("""
        def normalize_date(date):
            year, month, day = (int(part) for part in date.split("-"))$names_line
            return $result
        """, names_line=Raw(names_line), result=Raw(result))
    example = {"dmy": "07/03/2024", "mdy": "03/07/2024", "dotted": "07.03.2024",
               "month_first": f"{months[2]} 7, 2024", "day_first": f"7 {months[2]} 2024"}[style]
    facts = ["The input is always year-month-day with dashes.",
             f"The 7th of March 2024 must come out as '{example}'."]
    if style in ("month_first", "day_first"):
        facts.append("Months are written as three-letter abbreviations." if abbreviate
                     else "Months are written out in full.")
    dates = ["2024-03-07", "1999-12-31", "2000-01-01", "2023-11-09", "2021-06-15", "1987-02-28",
             f"20{rng.randint(10, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
             f"19{rng.randint(50, 99)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
             "2010-10-10", "2022-08-05"]
    return Variant(ask("Dates in our spreadsheet are a mess of one machine format. Write a "
                       "function that rewrites a date the way our office writes them.", source),
                   source, facts, [(d,) for d in dates])


def budget_totals(rng):
    threshold = rng.choice([20, 25, 50, 100])
    other = rng.choice(["other", "misc", "Other"])
    source = code("""
        def budget_totals(expenses):
            totals = {}
            for category, amount in expenses:
                totals[category] = totals.get(category, 0) + amount
            result = {}
            for category, total in totals.items():
                key = category if total >= $threshold else $other
                result[key] = round(result.get(key, 0) + total, 2)
            return result
        """, threshold=threshold, other=other)
    facts = ["Add up the amounts of each category.",
             f"Categories whose total is below {threshold} dollars are merged into one "
             f"category called '{other}'.",
             f"A category with exactly {threshold} dollars keeps its own name.",
             "Round every total to 2 decimal places and return a dict."]
    cases = [[["food", threshold], ["fun", threshold - 1]],
             [["rent", 900], ["food", 12.5], ["food", 30.25], ["books", 8]],
             [["gas", 5], ["toys", 6], ["tea", 2.5]], [],
             [["food", 200]]]
    categories = ["food", "rent", "gas", "fun", "books", "gifts", "travel"]
    for _ in range(5):
        cases.append([[rng.choice(categories), round(rng.uniform(1, 2.5 * threshold), 2)]
                      for _ in range(rng.randint(3, 8))])
    return Variant(ask("Write a function that groups my expenses (a list of category and amount "
                       "pairs) into totals per category; tiny categories should be lumped together.",
                       source), source, facts, [(c,) for c in cases])


def car_rental(rng):
    rates = {"economy": rng.choice([25, 30, 35]), "compact": rng.choice([35, 40, 45]),
             "suv": rng.choice([55, 60, 70])}
    insurance = rng.choice([5, 8, 10, 12])
    seventh_free = rng.random() < 0.5
    charged = "days - days // 7" if seventh_free else "days"
    source = code("""
        def car_rental(days, car_type):
            daily = $rates[car_type]
            charged_days = $charged
            return charged_days * daily + days * $insurance
        """, rates=rates, charged=Raw(charged), insurance=insurance)
    facts = [f"An economy car costs {rates['economy']} dollars a day.",
             f"A compact car costs {rates['compact']} dollars a day.",
             f"An SUV costs {rates['suv']} dollars a day.",
             "Every 7th rental day is free (one free day per full week)." if seventh_free
             else "There is no discount for long rentals.",
             f"Insurance of {insurance} dollars a day is always added, for every day including free ones."]
    cases = [(1, "economy"), (7, "economy"), (6, "suv"), (14, "compact"), (8, "suv"),
             (3, "compact"), (21, "suv"), (rng.randint(2, 30), "economy"),
             (rng.randint(2, 30), "compact"), (rng.randint(2, 30), "suv")]
    return Variant(ask("Write a function for my car rental desk that quotes the price of a "
                       "rental. Car types are 'economy', 'compact' and 'suv'.", source),
                   source, facts, cases)


def movie_ticket(rng):
    adult = rng.choice([10, 12, 12.5, 14])
    free_under = rng.choice([3, 4, 5])
    child_under = rng.choice([12, 13, 16])
    child = adult - rng.choice([3, 4, 5])
    senior_from = rng.choice([60, 65, 67])
    senior = adult - rng.choice([2, 4])
    cheap_day = rng.choice(["tuesday", "monday", "wednesday"])
    half_price = rng.random() < 0.5
    source = code("""
        def movie_ticket(age, day):
            if age < $free_under:
                return 0
            if age < $child_under:
                price = $child
            elif age >= $senior_from:
                price = $senior
            else:
                price = $adult
            if day.lower() == $cheap_day:
                price = $cheap
            return price
        """, free_under=free_under, child_under=child_under, child=child, senior_from=senior_from,
                  senior=senior, adult=adult, cheap_day=cheap_day,
                  cheap=Raw("price / 2" if half_price else "price - 2"))
    facts = [f"Children under {free_under} get in free.",
             f"Children from {free_under} up to under {child_under} pay {num(child)} dollars.",
             f"Adults pay {num(adult)} dollars.",
             f"Seniors aged {senior_from} and over pay {num(senior)} dollars.",
             f"On {cheap_day.capitalize()}s every paying ticket is half price." if half_price
             else f"On {cheap_day.capitalize()}s every paying ticket is 2 dollars cheaper.",
             "The day name can be written in any capitalization."]
    cases = [(free_under - 1, "saturday"), (free_under, "saturday"), (child_under - 1, "friday"),
             (child_under, "friday"), (senior_from, "sunday"), (senior_from - 1, "sunday"),
             (30, cheap_day.capitalize()), (8, cheap_day), (70, cheap_day.upper()), (45, "thursday")]
    return Variant(ask("Write a function that gives the price of a cinema ticket from the "
                       "person's age and the day of the week.", source), source, facts, cases)


def sort_tasks(rng):
    due_first = rng.random() < 0.5
    high_number_first = rng.random() < 0.5
    priority_key = "-task[1]" if high_number_first else "task[1]"
    key = f"(task[2], {priority_key}, task[0])" if due_first else f"({priority_key}, task[2], task[0])"
    source = code("""
        def sort_tasks(tasks):
            ordered = sorted(tasks, key=lambda task: $key)
            return [task[0] for task in ordered]
        """, key=Raw(key))
    facts = ["Each task is a list of name, priority number and due day number.",
             "Order by due day first, then by priority." if due_first
             else "Order by priority first, then by due day.",
             "A higher priority number is more urgent and comes first." if high_number_first
             else "Priority 1 is the most urgent; lower numbers come first.",
             "Earlier due days come first.",
             "Remaining ties are broken alphabetically by name.",
             "Return just the task names, in order."]
    names = ["laundry", "taxes", "email", "groceries", "dentist", "report", "gym", "call mom"]
    cases = [[["taxes", 1, 5], ["email", 3, 1]], [["gym", 2, 2], ["email", 2, 2], ["report", 2, 2]],
             [["laundry", 1, 1], ["report", 3, 1], ["dentist", 3, 4]], [],
             [["a", 5, 9], ["b", 1, 1]]]
    for _ in range(5):
        chosen = rng.sample(names, rng.randint(3, 6))
        cases.append([[name, rng.randint(1, 3), rng.randint(1, 5)] for name in chosen])
    return Variant(ask("Write a function that sorts my to-do list the way I work through it.",
                       source), source, facts, [(c,) for c in cases])


# ---------------------------------------------------------------- the registry

def family(make, tier, test_only=False):
    return Family(make.__name__, make, tier, test_only)


FAMILIES = [
    family(tip, "easy"), family(delivery_charge, "easy"), family(weekly_pay, "easy"),
    family(calories_burned, "easy"), family(sale_price, "easy"), family(ticket_total, "easy"),
    family(rental_late_fee, "easy"), family(league_points, "easy"), family(price_with_tax, "easy"),
    family(pizza_slices, "easy", test_only=True), family(water_liters, "easy", test_only=True),
    family(fuel_cost, "easy", test_only=True),
    family(shipping_cost, "medium"), family(letter_grade, "medium"), family(parking_fee, "medium"),
    family(library_fine, "medium"), family(password_strength, "medium"), family(income_tax, "medium"),
    family(overtime_pay, "medium"), family(checkout_total, "medium"),
    family(normalize_username, "medium"), family(hot_days, "medium"),
    family(electricity_bill, "medium"), family(heart_rate_zone, "medium"),
    family(loyalty_points, "medium"),
    family(format_phone, "medium", test_only=True), family(mask_card, "medium", test_only=True),
    family(sleep_report, "medium", test_only=True), family(car_rental, "medium", test_only=True),
    family(movie_ticket, "medium", test_only=True),
    family(format_duration, "hard"), family(scale_recipe, "hard"), family(longest_streak, "hard"),
    family(top_scorer, "hard"), family(restock_list, "hard"), family(score_summary, "hard"),
    family(split_bill, "hard"), family(top_words, "hard"), family(payroll, "hard"),
    family(title_case, "hard"),
    family(format_money, "hard", test_only=True), family(normalize_date, "hard", test_only=True),
    family(budget_totals, "hard", test_only=True), family(sort_tasks, "hard", test_only=True),
]


# The families of the first release, in their registry order: their tasks are shuffled together, as in the shipped
# files. Never edit this tuple (the shipped lines would change): a family added later goes into FAMILIES only, and
# its tasks are appended after these (generate).
FIRST_RELEASE = (
    "tip", "delivery_charge", "weekly_pay", "calories_burned", "sale_price", "ticket_total", "rental_late_fee",
    "league_points", "price_with_tax", "pizza_slices", "water_liters", "fuel_cost",
    "shipping_cost", "letter_grade", "parking_fee", "library_fine", "password_strength", "income_tax",
    "overtime_pay", "checkout_total", "normalize_username", "hot_days", "electricity_bill", "heart_rate_zone",
    "loyalty_points", "format_phone", "mask_card", "sleep_report", "car_rental", "movie_ticket",
    "format_duration", "scale_recipe", "longest_streak", "top_scorer", "restock_list", "score_summary",
    "split_bill", "top_words", "payroll", "title_case", "format_money", "normalize_date", "budget_totals",
    "sort_tasks",
)


# ---------------------------------------------------------------- generation

def call(source, args):
    """The test expression: the reference's function name applied to literal arguments."""
    name = re.match(r"def (\w+)", next(l for l in source.splitlines() if l.startswith("def "))).group(1)
    return f"{name}({', '.join(repr(a) for a in args)})"


def usable(variant):
    """True when the ten test calls are distinct and the reference gives ten non-None outputs
    that are not all equal.

    Runs our own freshly generated reference in a clean namespace (never model-written code).
    """
    if len({call(variant.source, args) for args in variant.tests}) != 10:
        return False
    namespace = {}
    exec(variant.source, namespace)
    outputs = [eval(call(variant.source, args), namespace) for args in variant.tests]
    return len(outputs) == 10 and None not in outputs and any(o != outputs[0] for o in outputs)


def draw_variants(fam, rng, count, at_least=None):
    """`count` variants of one family with distinct references, each checked with `usable`; fewer if the
    family has no more, as long as there are `at_least` (default: all `count`)."""
    variants, seen = [], set()
    for _ in range(200 * count):
        variant = fam.make(rng)
        if variant is None:  # an easy draw whose twist changed too few outputs
            continue
        body = variant.description.split("The signature of the function is:")[0]
        if re.search(r"\d", body):
            raise ValueError(f"{fam.name}: a digit in the description could reveal a hidden detail")
        if variant.source in seen or not usable(variant):
            continue
        seen.add(variant.source)
        variants.append(variant)
        if len(variants) == count:
            return variants
    if len(variants) >= (count if at_least is None else at_least):
        return variants
    raise ValueError(f"{fam.name}: could not draw {count} distinct usable variants")


def to_task(fam, variant):
    return {"family": fam.name, "tier": fam.tier,
            "problem_description": variant.description,
            "ground_truth": variant.source,
            "test_cases": {f"test{i}": call(variant.source, args)
                           for i, args in enumerate(variant.tests, 1)},
            "hidden_facts": list(variant.facts)}


def family_tasks(fam, seed=SEED):
    """(train, test, valid): the task dicts of one family, drawn from its own generator; the validation tasks
    are drawn after the others, so that adding them changed neither the train nor the test file."""
    rng = random.Random(f"{seed}:{fam.name}")
    n_train = 0 if fam.test_only else TRAIN_PER_FAMILY
    n_test = TEST_PER_TEST_ONLY if fam.test_only else TEST_PER_SHARED
    n_valid = 0 if fam.test_only else VALID_PER_SHARED
    variants = draw_variants(fam, rng, n_train + n_test + n_valid, at_least=n_train + n_test)
    return ([to_task(fam, v) for v in variants[:n_train]],
            [to_task(fam, v) for v in variants[n_train:n_train + n_test]],
            [to_task(fam, v) for v in variants[n_train + n_test:]])


def generate(seed=SEED):
    """(train_tasks, test_tasks, valid_tasks), each a list of task dicts in the official backend schema. The
    validation tasks are further draws of the training families, for choosing settings without the test tasks.

    The tasks of the FIRST_RELEASE families are shuffled together, one shuffle per file; the tasks of a family
    added later come after them, a family at a time in the order of FAMILIES, each in its draw order, with the
    next ids. So adding a family leaves every line before it as it was, and the demo's split of those lines
    (every third easy training task, in file order) with it. Each family draws from its own generator, so its
    tasks do not depend on the other families either."""
    names = [fam.name for fam in FAMILIES]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # a family's draws are seeded with its name: two families of one name would draw the same tasks
        raise ValueError(f"family names registered twice in FAMILIES: {twice}")
    missing = [name for name in FIRST_RELEASE if name not in names]
    if missing:
        raise ValueError(f"FIRST_RELEASE families missing from FAMILIES (the shipped files need them): {missing}")
    drawn = {fam.name: family_tasks(fam, seed) for fam in FAMILIES}
    added = [name for name in names if name not in FIRST_RELEASE]
    order = random.Random(f"{seed}:order")
    splits = []
    for k, split in enumerate(("train", "test", "valid")):
        tasks = [task for name in FIRST_RELEASE for task in drawn[name][k]]
        order.shuffle(tasks)
        tasks += [task for name in added for task in drawn[name][k]]
        splits.append([{"task_id": f"backend-{split}-{i:04d}", **task} for i, task in enumerate(tasks, 1)])
    return splits


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FOLDER,
                        help="folder for backend_train.jsonl, backend_test.jsonl and backend_valid.jsonl")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of every random draw")
    args = parser.parse_args()
    print(f"args: {vars(args)}")
    train, test, valid = generate(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for name, tasks in (("backend_train.jsonl", train), ("backend_test.jsonl", test), ("backend_valid.jsonl", valid)):
        path = os.path.join(args.out, name)
        write_jsonl(path, tasks)
        easy = sum(t["tier"] == "easy" for t in tasks)
        families = len({t["family"] for t in tasks})
        print(f"wrote {path}: {len(tasks)} tasks, {families} families, {easy} easy")


if __name__ == "__main__":
    main()
