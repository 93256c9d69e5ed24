"""The one page template of the embedded frontend tasks: the facts a person can tell, and the page they fill.

A page is decided by four subjects (SUBJECTS), each a value in one slot of TEMPLATE:
    colors    the page's background and text colors, two CSS color names in the :root line
    accent    one CSS color name in the :root line: the header, the section headings' bars, borders and boxes
    layout    the <body> class: single, hero, sidebar or cards
    sections  which section kinds appear, and in what order (SECTIONS: each kind has one fixed title and body)
Each kind of site has a default page (DEFAULTS): what a script that asks nothing writes for it. A task's page
departs from its kind's default in a few subjects (colbench/tasks/frontend.py). Everything else is fixed, the
same in every task: each section's body, and STYLE, the site's shared style sheet, which each task carries as
its `stylesheet` and the renderer puts ahead of every page of the task (as a linked CSS file), so that a page
holds only its facts. The title is the business's name, which the request gives. So a page with every subject
right is the reference page itself, and what nobody tells never decides a score.
"""

# name -> (background, text): the page's colors, as CSS color names; light backgrounds, then dark ones.
PALETTES = {
    "cream and brown": ("linen", "saddlebrown"), "forest green": ("honeydew", "darkgreen"),
    "white and slate": ("white", "darkslategray"), "blush pink": ("lavenderblush", "maroon"),
    "sky blue": ("aliceblue", "midnightblue"), "lavender": ("lavender", "indigo"), "sand": ("wheat", "sienna"),
    "slate": ("gainsboro", "black"), "mint": ("mintcream", "darkslategray"),
    "navy and white": ("navy", "white"), "charcoal": ("black", "white"), "midnight": ("midnightblue", "ivory"),
    "deep green": ("darkgreen", "white"), "plum": ("indigo", "white"), "wine": ("maroon", "white"),
}
DARK = {"navy and white", "charcoal", "midnight", "deep green", "plum", "wine"}
ACCENTS = ("chocolate", "gold", "forestgreen", "orange", "teal", "palevioletred", "royalblue", "mediumpurple",
           "firebrick", "crimson", "purple", "lime")
COLOR_PARTS = ("background", "text")
# What each value of a slot looks like, in the words the human adds after it.
LAYOUTS = {"single": "one column", "hero": "a tall banner with the title on top",
           "sidebar": "the title in a band down the left side", "cards": "the sections in two columns"}
# kind -> (title, body): every page that has a kind shows it with this title and body.
SECTIONS = {
    "about": ("About Us", "<p>A small local team.</p>"),
    "services": ("Services", "<ul><li>Quality<li>Care<li>Value</ul>"),
    "hours": ("Hours", "<p>Mon-Fri 9-6<br>Sat 10-4</p>"),
    "team": ("Our Team", "<p>Anna<br>Ben<br>Cleo<br>Dan</p>"),
    "reviews": ("Reviews", "<blockquote>Wonderful!</blockquote>"),
    "gallery": ("Gallery", '<p class="box"></p>'),
    "faq": ("FAQ", "<p><b>Need to book?</b> No.</p>"),
    "contact": ("Contact", "<form><input><button>Send</button></form>"),
}
TITLES = {title: kind for kind, (title, _) in SECTIONS.items()}
SUBJECTS = ("colors", "accent", "layout", "sections")


def facts_of(palette, accent, layout, sections):
    """A page's facts: {subject: value}, the colors from PALETTES' `palette`."""
    return {"colors": dict(zip(COLOR_PARTS, PALETTES[palette])), "accent": accent, "layout": layout,
            "sections": list(sections)}


# kind of site -> its default page: what a script that asks nothing writes for a site of that kind.
DEFAULTS = {
    "bakery": facts_of("cream and brown", "chocolate", "hero", ["About Us", "Gallery", "Hours", "Contact"]),
    "law firm": facts_of("navy and white", "gold", "single", ["About Us", "Services", "Our Team", "Contact"]),
    "hiking club": facts_of("forest green", "forestgreen", "cards", ["About Us", "Gallery", "Reviews", "FAQ"]),
    "dental clinic": facts_of("white and slate", "teal", "single", ["Services", "Hours", "FAQ", "Contact"]),
    "yoga studio": facts_of("lavender", "mediumpurple", "hero", ["About Us", "Hours", "Our Team", "Reviews"]),
    "bookstore": facts_of("sand", "firebrick", "sidebar", ["About Us", "Reviews", "Hours", "Contact"]),
    "coffee shop": facts_of("charcoal", "orange", "cards", ["Hours", "Gallery", "Reviews", "Contact"]),
    "gym": facts_of("slate", "crimson", "sidebar", ["Services", "Our Team", "Hours", "FAQ"]),
}

STYLE = ("body{margin:0;background:var(--background);color:var(--text)}b{color:var(--accent)}"
         "h2{background:var(--accent);color:var(--background);margin:0;padding:12px}"
         "header{background:var(--accent);padding:20px}main{padding:20px}.hero header{padding:90px}"
         ".sidebar{display:flex}.cards main{columns:2}main>*{border:8px solid var(--accent);margin:0;padding:20px}"
         ".box{background:var(--accent);height:120px}")
TEMPLATE = ("<html><style>:root{{{colors}}}</style>\n"
            '<body class="{layout}"><header><h1>{title}</h1></header><main>\n{sections}</main></body></html>')


def default_facts(task):
    """The default page's facts of the task's kind of site (`site`); a task of no known kind: the law firm's."""
    return DEFAULTS.get(task.get("site"), DEFAULTS["law firm"])


def build_page(facts, title):
    """The page of `facts` (every subject of SUBJECTS) under `title`. Sections whose title is not a SECTIONS title
    are left out."""
    colors = ";".join(f"--{part}:{facts['colors'][part]}" for part in COLOR_PARTS) + f";--accent:{facts['accent']}"
    sections = "".join(f"<h2>{t}</h2>{SECTIONS[TITLES[t]][1]}\n" for t in facts["sections"] if t in TITLES)
    return TEMPLATE.format(colors=colors, layout=facts["layout"], title=title, sections=sections)
