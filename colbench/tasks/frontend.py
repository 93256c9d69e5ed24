"""The shipped frontend (web design) tasks of ColBench, generated from small templates.

    python -m colbench.tasks.frontend              # rewrites colbench/tasks/frontend_{train,test}.jsonl
    python -m colbench.tasks.frontend --out DIR    # writes the two files into DIR instead

The output is byte-identical on every run: every draw comes from a `random.Random` seeded with
`--seed`, the split and the task's number, never from the clock.

A task is a vague request for a small website ("I run a bakery called Golden Crust and would
like a simple site for it...") and the reference page: one self-contained HTML file with its CSS
in a <style> block, no scripts, no images, no network. What the request leaves out is what the
agent has to find out from the simulated human: the palette, the fonts, the layout (a single
column, a sidebar, a hero banner, a grid of cards), the navigation (a bar, centered links,
pills, links beside the title, none), which sections there are and in what order, and their text.
Pages stay at a few KB so that a small model's context holds one.
"""
import argparse
import html
import os
import random

from colbench.data import write_jsonl
from colbench.tasks import FOLDER

SEED = 2503
N_TRAIN, N_TEST = 120, 40

# ---------------------------------------------------------------- the things a page is drawn from

# name: background, text, accent (buttons, links, headings), header background, header text, card background
PALETTES = {
    "cream and brown": ("#fdf6e3", "#3b2f2f", "#8b4513", "#5c3a21", "#fdf6e3", "#fff8ec"),
    "navy and gold": ("#0f1c3f", "#f5f5f5", "#d4a017", "#0a1330", "#d4a017", "#1a2a57"),
    "forest green": ("#f1f8f1", "#1b3022", "#2e7d32", "#1b5e20", "#ffffff", "#ffffff"),
    "charcoal and orange": ("#222222", "#eeeeee", "#ff7a1a", "#111111", "#ff7a1a", "#333333"),
    "white and teal": ("#ffffff", "#263238", "#00897b", "#00695c", "#ffffff", "#e0f2f1"),
    "blush pink": ("#fff0f3", "#4a2c35", "#d63f6c", "#f8bbd0", "#4a2c35", "#ffffff"),
    "sky blue": ("#e8f4fd", "#102a43", "#1e88e5", "#1565c0", "#ffffff", "#ffffff"),
    "lavender": ("#f3effa", "#2d1f47", "#7e57c2", "#4a2c82", "#ffffff", "#ffffff"),
    "sand and terracotta": ("#f4e9d8", "#3e2c23", "#c0583a", "#c0583a", "#fff8f0", "#fbf5ec"),
    "black and lime": ("#0d0d0d", "#e6e6e6", "#a4e400", "#1a1a1a", "#a4e400", "#1f1f1f"),
    "slate and red": ("#eceff1", "#212121", "#c62828", "#37474f", "#ffffff", "#ffffff"),
    "mint and plum": ("#e9fbf3", "#17332a", "#8e245f", "#8e245f", "#ffffff", "#ffffff"),
}
FONTS = ["Georgia, serif", "Arial, Helvetica, sans-serif", "'Trebuchet MS', sans-serif", "Verdana, sans-serif",
         "'Courier New', monospace", "'Palatino Linotype', Palatino, serif"]
LAYOUTS = ["single", "hero", "sidebar", "cards"]
# The navigations that fit each layout (links beside the title need a header bar; a sidebar holds its own).
NAV_STYLES = {"single": ["bar", "centered", "pills", "beside", "none"],
              "cards": ["bar", "centered", "pills", "beside", "none"],
              "hero": ["bar", "pills", "none"], "sidebar": ["side"]}

PEOPLE = ["Maria Lopez", "James Carter", "Aiko Tanaka", "Omar Haddad", "Lena Fischer", "Priya Nair", "Tom Becker",
          "Sofia Rossi", "Kwame Mensah", "Elena Petrova", "Lucas Martin", "Hana Kim", "David Cohen", "Grace Obi"]
STREETS = ["Maple Street", "Harbor Road", "Elm Avenue", "Station Square", "Mill Lane", "Oak Boulevard", "River Walk"]
TOWNS = ["Springfield", "Riverton", "Lakeside", "Brookhaven", "Fairview", "Ashford", "Cedar Falls"]
MONTHS = ["March", "April", "May", "June", "July", "September", "October"]
PRAISE = ["Friendly people and great quality, every single time.", "I recommend them to all my friends.",
          "Exactly what I was looking for, and more.", "Professional, warm and always on time.",
          "The best in town, hands down.", "I keep coming back, and so does my family."]
DAYS = [("Monday - Friday", "{a} - {b}"), ("Saturday", "{c} - {d}"), ("Sunday", "{e}")]

# Per kind of site: business names, what it is, a few phrasings of the vague request, a blurb for
# the about section, the offerings (name, detail), their heading, team roles, events, and which
# optional sections fit. Every request names the business and nothing about the design.
SITES = {
    "bakery": dict(
        names=["Golden Crust", "Rise & Shine Bakery", "The Flour Pot", "Sweet Crumb"], what="bakery",
        blurb="We bake bread, pastries and cakes by hand every morning with local flour and butter.",
        items=[("Sourdough Loaf", "$6"), ("Butter Croissant", "$3"), ("Cinnamon Roll", "$4"), ("Rye Bread", "$5"),
               ("Lemon Tart", "$4.50"), ("Baguette", "$3.50")],
        items_titles=["Fresh Today", "Our Breads", "The Menu"], roles=["Head Baker", "Pastry Chef", "Shop Manager"],
        events=["Bread baking class", "Kids' cookie morning", "Holiday cake tasting"],
        sections=["about", "items", "hours", "testimonials", "contact", "events"]),
    "law firm": dict(
        names=["Carter & Associates", "Hale Legal Group", "Whitmore Law", "Brightline Attorneys"], what="law firm",
        blurb="For over twenty years we have helped families and small businesses with clear, honest legal advice.",
        items=[("Family Law", "Divorce, custody and adoption"), ("Business Law", "Contracts and company setup"),
               ("Real Estate", "Buying, selling and leases"), ("Wills & Estates", "Planning for the future"),
               ("Employment", "Disputes and agreements")],
        items_titles=["Practice Areas", "How We Help", "Our Services"],
        roles=["Senior Partner", "Partner", "Paralegal"],
        events=["Free legal clinic", "Estate planning seminar", "Small business Q&A"],
        sections=["about", "items", "team", "testimonials", "contact", "faq"]),
    "hiking club": dict(
        names=["Summit Seekers", "Trailblazers Club", "Ridge Runners", "Pine Path Hikers"], what="hiking club",
        blurb="We are a friendly group of walkers who explore the hills and forests around town every weekend.",
        items=[("Beginner Walks", "Easy 5 km routes"), ("Mountain Days", "Full-day summit hikes"),
               ("Night Hikes", "Under the stars"), ("Trail Care", "Help keep paths clean"),
               ("Photo Walks", "Slow hikes with cameras")],
        items_titles=["What We Do", "Our Hikes", "Activities"], roles=["Club Leader", "Route Planner", "Treasurer"],
        events=["Lake loop hike", "Sunrise summit", "Autumn forest walk", "Trail clean-up day"],
        sections=["about", "items", "events", "team", "contact", "pricing"]),
    "dental clinic": dict(
        names=["Bright Smile Dental", "Gentle Care Dentistry", "Pearl Dental Studio", "Riverside Dental"],
        what="dental clinic",
        blurb="Modern, gentle dental care for the whole family, with evening appointments available.",
        items=[("Check-ups", "Exams and cleaning"), ("Whitening", "A brighter smile"),
               ("Braces", "For kids and adults"),
               ("Implants", "Permanent replacements"), ("Emergency Care", "Same-day visits")],
        items_titles=["Treatments", "Our Services", "What We Offer"], roles=["Dentist", "Hygienist", "Receptionist"],
        events=["Open day", "Free kids check-up week"],
        sections=["about", "items", "hours", "team", "testimonials", "contact", "faq"]),
    "yoga studio": dict(
        names=["Lotus Flow", "Still Water Yoga", "Sunrise Studio", "Breathe Yoga Loft"], what="yoga studio",
        blurb="A calm space for every body: classes for complete beginners and for experienced yogis.",
        items=[("Hatha", "Slow and steady"), ("Vinyasa", "Flowing movement"), ("Yin", "Deep stretching"),
               ("Prenatal", "For mothers-to-be"), ("Meditation", "Quiet the mind")],
        items_titles=["Classes", "Our Classes", "Styles We Teach"], roles=["Founder", "Yoga Teacher", "Studio Manager"],
        events=["Weekend retreat", "Full moon meditation", "Beginners' workshop"],
        sections=["about", "items", "pricing", "team", "testimonials", "contact", "hours"]),
    "bookstore": dict(
        names=["Paper Lantern Books", "The Reading Nook", "Chapter One", "Owl & Ink Books"], what="bookstore",
        blurb="An independent bookshop with new and second-hand books, a children's corner and good coffee.",
        items=[("New Releases", "Fresh off the press"), ("Used Books", "Hidden treasures"),
               ("Children", "Picture books and more"),
               ("Book Club", "Meets monthly"), ("Gift Cards", "For every reader")],
        items_titles=["In the Shop", "What You'll Find", "Browse"], roles=["Owner", "Bookseller", "Events Host"],
        events=["Author reading", "Poetry night", "Kids' story hour"],
        sections=["about", "items", "events", "hours", "contact", "testimonials"]),
    "coffee shop": dict(
        names=["Bean There", "The Daily Grind", "Copper Cup Cafe", "Morning Ritual"], what="coffee shop",
        blurb="Small-batch roasted coffee, homemade cakes and a quiet corner to work or read.",
        items=[("Espresso", "$2.50"), ("Flat White", "$3.50"), ("Cold Brew", "$4"), ("Chai Latte", "$4"),
               ("Banana Bread", "$3"), ("Avocado Toast", "$7")],
        items_titles=["Menu", "Our Drinks", "What We Serve"], roles=["Head Barista", "Roaster", "Owner"],
        events=["Latte art class", "Open mic night", "Coffee tasting"],
        sections=["about", "items", "hours", "testimonials", "contact"]),
    "architecture firm": dict(
        names=["Linea Architects", "Northlight Studio", "Form & Field", "Atelier Stone"], what="architecture studio",
        blurb="We design homes, schools and public spaces that are simple, bright and built to last.",
        items=[("Houses", "Private homes"), ("Schools", "Places to learn"), ("Offices", "Workplaces with light"),
               ("Renovation", "New life for old buildings"), ("Landscape", "Gardens and parks")],
        items_titles=["Projects", "Our Work", "Selected Work"], roles=["Principal Architect", "Architect", "Designer"],
        events=["Studio open house", "Talk on green building"],
        sections=["about", "items", "team", "contact", "testimonials"]),
    "music festival": dict(
        names=["Harbor Sound Fest", "Meadow Beats", "Riverside Jazz Days", "Echo Valley Festival"],
        what="music festival",
        blurb="Three days of live music on four stages by the water, with food trucks and camping.",
        items=[("Main Stage", "Headline acts every night"), ("Jazz Tent", "Late night sessions"),
               ("Folk Corner", "Acoustic sets"), ("Kids Zone", "Music for little ones"),
               ("Food Court", "Twenty food trucks")],
        items_titles=["Line-up", "Stages", "At the Festival"], roles=["Festival Director", "Booker", "Volunteer Lead"],
        events=["Opening night", "Headliner show", "Closing party"],
        sections=["about", "items", "events", "pricing", "faq", "contact"]),
    "animal shelter": dict(
        names=["Happy Paws Rescue", "Second Chance Shelter", "Whisker Haven", "Safe Harbor Animal Rescue"],
        what="animal shelter",
        blurb="We rescue cats and dogs, care for them and help them find loving new homes.",
        items=[("Adopt", "Meet our animals"), ("Foster", "Give a temporary home"),
               ("Volunteer", "Walk dogs, cuddle cats"),
               ("Donate", "Food, blankets, funds"), ("Lost & Found", "Reunite pets")],
        items_titles=["How to Help", "Get Involved", "Ways to Help"],
        roles=["Shelter Manager", "Vet Nurse", "Volunteer Coordinator"],
        events=["Adoption day", "Charity dog walk", "Pet photo day"],
        sections=["about", "items", "events", "hours", "contact", "testimonials"]),
    "plumbing company": dict(
        names=["FlowRight Plumbing", "Pipe Pros", "Clearwater Plumbing", "Steady Drip Repairs"],
        what="plumbing company",
        blurb="Fast, friendly plumbers available day and night, with fair prices and no surprises.",
        items=[("Leak Repair", "From $80"), ("Drain Cleaning", "From $95"), ("Boiler Service", "From $120"),
               ("Bathroom Fitting", "Free quote"), ("Emergency Call-out", "24/7")],
        items_titles=["Services", "What We Fix", "Our Services"], roles=["Master Plumber", "Plumber", "Office Manager"],
        events=["Winter boiler check month"],
        sections=["about", "items", "pricing", "testimonials", "contact", "faq"]),
    "tech startup": dict(
        names=["Nimbus Notes", "Pixelcraft", "TaskPilot", "Loopwise"], what="software startup",
        blurb="A simple app that keeps your team's notes, tasks and plans in one tidy place.",
        items=[("Shared Notes", "Write together"), ("Task Boards", "See what's next"),
               ("Calendar Sync", "Never miss a date"),
               ("Offline Mode", "Works anywhere"), ("Integrations", "Connect your tools")],
        items_titles=["Features", "Why Teams Love It", "What It Does"], roles=["CEO", "CTO", "Head of Design"],
        events=["Product launch webinar", "Community meetup"],
        sections=["about", "items", "pricing", "testimonials", "team", "faq", "contact"]),
    "florist": dict(
        names=["Petal & Stem", "Wild Bloom", "The Flower Cart", "Rosewood Florals"], what="flower shop",
        blurb="Seasonal bouquets, wedding flowers and plants, arranged by hand and delivered in town.",
        items=[("Bouquets", "From $35"), ("Wedding Flowers", "By appointment"), ("Potted Plants", "From $15"),
               ("Sympathy", "Gentle arrangements"), ("Subscriptions", "Fresh flowers weekly")],
        items_titles=["Shop", "Our Flowers", "Arrangements"], roles=["Head Florist", "Florist", "Delivery"],
        events=["Wreath workshop", "Spring flower market"],
        sections=["about", "items", "hours", "testimonials", "contact", "events"]),
    "fitness gym": dict(
        names=["Iron Works Gym", "Peak Fitness", "Core Strength Club", "Pulse Athletics"], what="gym",
        blurb="Open early and late, with friendly coaches, modern equipment and classes for every level.",
        items=[("Strength", "Free weights and racks"), ("Cardio", "Bikes, rowers, treadmills"),
               ("HIIT Classes", "Fast and intense"),
               ("Personal Training", "One-on-one coaching"), ("Sauna", "Relax after training")],
        items_titles=["Facilities", "What We Offer", "Training"],
        roles=["Head Coach", "Personal Trainer", "Front Desk"],
        events=["Summer fitness challenge", "Free trial week"],
        sections=["about", "items", "pricing", "hours", "team", "contact"]),
}
OPTIONAL_TITLES = {
    "about": ["About Us", "Our Story", "Who We Are", "Welcome"],
    "hours": ["Opening Hours", "When We're Open", "Hours"],
    "testimonials": ["What People Say", "Testimonials", "Kind Words"],
    "team": ["Meet the Team", "Our Team", "The People"],
    "contact": ["Contact", "Get in Touch", "Find Us"],
    "events": ["Upcoming Events", "What's On", "Calendar"],
    "pricing": ["Pricing", "Membership", "Plans"],
    "faq": ["FAQ", "Questions", "Good to Know"],
}
REQUESTS = [
    "I run a {what} called {name} and I'd like a simple website for it.",
    "Can you make a homepage for {name}? It's a {what}.",
    "We need a website for our {what}, {name}. Nothing fancy, just something that looks good.",
    "I want a one-page site for {name}, my {what}, so people can find out about us.",
    "Please build a landing page for {name}, a {what} in town.",
]
REQUEST_ENDINGS = ["", " I have a look in mind, so ask me.", " I'll tell you what I think as we go.",
                   " Show me a draft and I'll say what to change."]


# ---------------------------------------------------------------- one page

def esc(text):
    return html.escape(text, quote=True)


def draw_page(rng):
    """(site kind, request, reference HTML, the design choices) for one task, all from `rng`."""
    kind = rng.choice(sorted(SITES))
    site = SITES[kind]
    name = rng.choice(site["names"])
    palette = rng.choice(sorted(PALETTES))
    bg, text, accent, head_bg, head_text, card_bg = PALETTES[palette]
    font, heading_font = rng.choice(FONTS), rng.choice(FONTS)
    layout = rng.choice(LAYOUTS)
    nav_style = rng.choice(NAV_STYLES[layout])
    optional = [s for s in site["sections"] if s not in ("about", "items")]
    sections = ["about", "items"] + rng.sample(optional, rng.randint(1, min(3, len(optional))))
    rng.shuffle(sections)
    if rng.random() < 0.6:  # most pages open with the about section
        sections.remove("about")
        sections.insert(0, "about")
    titles = {s: rng.choice(site["items_titles"] if s == "items" else OPTIONAL_TITLES[s]) for s in sections}
    links = ["Home"] + [titles[s] for s in sections][:4]
    tagline = rng.choice(["Since 19%d" % rng.randint(70, 99), "Made with care", "Welcome!",
                          f"Proudly serving {rng.choice(TOWNS)}",
                          f"Your local {site['what']}", "Open to everyone"])
    choices = dict(site=kind, palette=palette, layout=layout, nav=nav_style, font=font, sections=sections)

    css = [f"body{{margin:0;background:{bg};color:{text};font-family:{font};"
           f"font-size:{rng.choice([15, 16, 17, 18])}px;line-height:1.5}}",
           f"h1,h2,h3{{font-family:{heading_font}}}",
           f"h1{{font-size:{rng.choice([30, 36, 42, 48, 56])}px;margin:0}}",
           f"h2{{color:{accent};font-size:{rng.choice([22, 24, 28])}px}}",
           f"a{{color:{accent};text-decoration:none}}",
           f".card{{background:{card_bg};padding:16px;border-radius:{rng.choice([0, 4, 8, 16])}px;"
           f"border:1px solid {accent}33}}",
           f"footer{{background:{head_bg};color:{head_text};text-align:center;padding:14px}}",
           f".btn{{display:inline-block;background:{accent};color:{bg};padding:10px 22px;border-radius:6px}}"]
    width = rng.choice([720, 800, 900, 960])
    nav = nav_html(nav_style, links, css, bg, accent, head_text)
    title = f"<h1>{esc(name)}</h1><p>{esc(tagline)}</p>"
    inner = "\n".join(section_html(rng, site, s, titles[s], name, layout) for s in sections)
    if layout == "cards":
        css.append(".grid{display:grid;grid-template-columns:repeat(3,1fr);gap:16px}")
        css.append(".sections{display:grid;grid-template-columns:1fr 1fr;gap:20px}")
    if layout == "sidebar":
        css += [f".layout{{display:grid;grid-template-columns:{rng.choice([200, 220, 260])}px 1fr;min-height:100vh}}",
                f"aside{{background:{head_bg};color:{head_text};padding:24px}}",
                f"aside a{{display:block;color:{head_text};padding:6px 0}}", "aside h1{font-size:26px}",
                "main{padding:24px 40px}"]
        body = f'<div class="layout"><aside>{title}{nav}</aside><main>{inner}</main></div>'
    else:
        css.append(f"main{{max-width:{width}px;margin:0 auto;padding:20px}}")
        if layout == "hero":
            css.append(f".hero{{background:{head_bg};color:{head_text};text-align:center;"
                       f"padding:{rng.choice([60, 80, 100])}px 20px}}"
                       f" .hero .btn{{background:{head_text};color:{head_bg}}}")
            button = rng.choice(["Visit Us", "Book Now", "Learn More", "Join Us"])
            header = f'{nav}<div class="hero">{title}<p><a class="btn" href="#contact">{esc(button)}</a></p></div>'
        elif nav_style == "beside":
            css.append(f"header{{background:{head_bg};color:{head_text};display:flex;justify-content:space-between;"
                       "align-items:center;padding:16px 32px}")
            header = f"<header><div>{title}</div>{nav}</header>"
        else:
            css.append(f"header{{background:{head_bg};color:{head_text};padding:{rng.choice([20, 30, 40])}px;"
                       f"text-align:{rng.choice(['left', 'center'])}}}")
            header = f"<header>{title}</header>{nav}" if nav_style != "centered" else f"<header>{title}{nav}</header>"
        main = f'<main><div class="sections">{inner}</div></main>' if layout == "cards" else f"<main>{inner}</main>"
        body = header + main
    if rng.random() < 0.8:
        body += f"<footer>&copy; 2024 {esc(name)}. {esc(rng.choice(STREETS))}, {esc(rng.choice(TOWNS))}</footer>"
    page = ("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(name)}</title>\n<style>\n" + "\n".join(css) + "\n</style>\n</head>\n<body>\n"
            + body + "\n</body>\n</html>\n")
    request = rng.choice(REQUESTS).format(what=site["what"], name=name) + rng.choice(REQUEST_ENDINGS)
    return kind, request, page, choices


def nav_html(style, links, css, bg, accent, head_text):
    """The navigation for `style`, its CSS appended to `css`; 'none' has no navigation at all."""
    anchors = "".join(f'<a href="#{anchor(link)}">{esc(link)}</a>' for link in links)
    if style == "none":
        return ""
    if style == "bar":
        css.append(f"nav{{background:{accent};padding:12px 24px}} "
                   f"nav a{{color:{bg};margin-right:22px;font-weight:bold}}")
    elif style == "centered":
        css.append("nav{text-align:center;padding:10px} nav a{margin:0 14px;text-transform:uppercase;"
                   f"letter-spacing:1px;color:{head_text}}}")
    elif style == "pills":
        css.append("nav{text-align:center;padding:14px} nav a{display:inline-block;margin:4px;padding:6px 16px;"
                   f"border-radius:20px;border:2px solid {accent}}}")
    elif style == "beside":
        css.append(f"nav a{{color:{head_text};margin-left:18px}}")
    return f"<nav>{anchors}</nav>"


def anchor(title):
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def section_html(rng, site, section, title, name, layout):
    """One <section> with an <h2> `title` and its content."""
    if section == "about":
        content = f"<p>{esc(site['blurb'])}</p>"
    elif section == "items":
        items = rng.sample(site["items"], rng.randint(3, min(6, len(site["items"]))))
        if layout == "cards" or rng.random() < 0.3:
            content = '<div class="grid">' + "".join(
                f'<div class="card"><h3>{esc(n)}</h3><p>{esc(d)}</p></div>' for n, d in items) + "</div>"
            if layout != "cards":
                content = content.replace(
                    'class="grid"', 'class="grid" style="display:grid;grid-template-columns:repeat(3,1fr);gap:12px"')
        else:
            content = "<ul>" + "".join(f"<li><strong>{esc(n)}</strong> &mdash; {esc(d)}</li>"
                                       for n, d in items) + "</ul>"
    elif section == "hours":
        times = dict(a=f"{rng.randint(6, 9)}:00", b=f"{rng.randint(5, 8)}:00 pm", c=f"{rng.randint(7, 10)}:00",
                     d=f"{rng.randint(2, 6)}:00 pm", e=rng.choice(["Closed", "10:00 - 2:00 pm"]))
        content = "<table>" + "".join(f"<tr><td>{day}</td><td>{span.format(**times)}</td></tr>"
                                      for day, span in DAYS) + "</table>"
    elif section == "testimonials":
        content = "".join(f'<blockquote class="card">&ldquo;{esc(q)}&rdquo; &mdash; {esc(p)}</blockquote>'
                          for q, p in zip(rng.sample(PRAISE, 2), rng.sample(PEOPLE, 2)))
    elif section == "team":
        content = "<ul>" + "".join(f"<li>{esc(p)}, {esc(r)}</li>"
                                   for p, r in zip(rng.sample(PEOPLE, 3), site["roles"])) + "</ul>"
    elif section == "contact":
        content = (f"<p>{rng.randint(2, 250)} {esc(rng.choice(STREETS))}, {esc(rng.choice(TOWNS))}<br>"
                   f"Phone: 555-{rng.randint(1000, 9999)}<br>Email: hello@{anchor(name).replace('-', '')}.example</p>")
        if rng.random() < 0.4:
            content += ('<form><input placeholder="Your email"> <button class="btn">'
                        f'{esc(rng.choice(["Send", "Subscribe", "Contact Us"]))}</button></form>')
    elif section == "events":
        content = "<ul>" + "".join(f"<li>{rng.choice(MONTHS)} {rng.randint(1, 28)}: {esc(e)}</li>"
                                   for e in rng.sample(site["events"], min(3, len(site["events"])))) + "</ul>"
    elif section == "pricing":
        tiers = [("Basic", rng.choice([10, 15, 20])), ("Plus", rng.choice([30, 35, 40])),
                 ("Premium", rng.choice([60, 75, 90]))]
        content = ('<div class="grid" style="display:grid;grid-template-columns:repeat(3,1fr);gap:12px">' + "".join(
            f'<div class="card"><h3>{t}</h3><p>${p} / month</p></div>' for t, p in tiers) + "</div>")
    else:  # faq
        content = ("<p><strong>Do I need to book?</strong> Booking is recommended but not required.</p>"
                   f"<p><strong>Where do I park?</strong> There is free parking on {esc(rng.choice(STREETS))}.</p>")
    return f'<section id="{anchor(title)}"><h2>{esc(title)}</h2>{content}</section>'


# ---------------------------------------------------------------- the two files

def make_tasks(split, count, seed=SEED):
    tasks = []
    for number in range(1, count + 1):
        rng = random.Random(f"{seed}-{split}-{number}")
        kind, request, page, choices = draw_page(rng)
        tasks.append({"task_id": f"frontend-{split}-{number:04d}", **choices, "problem_description": request,
                      "ground_truth": page})
    return tasks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FOLDER,
                        help="folder for frontend_train.jsonl and frontend_test.jsonl")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of every draw")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for split, count in (("train", N_TRAIN), ("test", N_TEST)):
        path = os.path.join(args.out, f"frontend_{split}.jsonl")
        tasks = make_tasks(split, count, args.seed)
        write_jsonl(path, tasks)
        sizes = [len(task["ground_truth"]) for task in tasks]
        print(f"{path}: {len(tasks)} tasks, pages {min(sizes)}-{max(sizes)} characters")


if __name__ == "__main__":
    main()
