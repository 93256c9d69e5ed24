"""The one page template of the embedded frontend tasks: the facts a person can tell, and the page they fill.

A page is decided by three facts, each a value in one slot of TEMPLATE:
    colors    four CSS color names in the :root line (background, text, accent, band)
    layout    the <body> class: single, hero, sidebar or cards
    sections  which section kinds appear, and in what order (SECTIONS: each kind has one fixed title and body)
Everything else is fixed, the same in every task: each section's body, and STYLE, the site's shared style
sheet, which each task carries as its `stylesheet` and the renderer puts ahead of every page of the task (as
a linked CSS file), so that a page holds only its facts. The title is the business's name, which the request
gives. So a page with every fact right is the reference page itself, and what nobody tells never decides a
score.
"""

# name -> (background, text, accent, band), as CSS color names: the accent colors headings and boxes, the band
# the header (a banner in the hero layout, a column in the sidebar one).
PALETTES = {
    "cream and brown": ("linen", "saddlebrown", "chocolate", "burlywood"),
    "navy and gold": ("navy", "white", "gold", "goldenrod"),
    "forest green": ("honeydew", "darkgreen", "forestgreen", "lightgreen"),
    "charcoal and orange": ("black", "white", "orange", "dimgray"),
    "white and teal": ("white", "darkslategray", "teal", "paleturquoise"),
    "blush pink": ("lavenderblush", "maroon", "palevioletred", "pink"),
    "sky blue": ("aliceblue", "midnightblue", "royalblue", "lightskyblue"),
    "lavender": ("lavender", "indigo", "mediumpurple", "thistle"),
    "sand and terracotta": ("wheat", "sienna", "firebrick", "tan"),
    "black and lime": ("black", "white", "lime", "darkolivegreen"),
    "slate and red": ("gainsboro", "black", "crimson", "slategray"),
    "mint and plum": ("mintcream", "darkslategray", "purple", "plum"),
}
COLOR_PARTS = ("background", "text", "accent", "band")
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

# The page with nothing told: what a script writes for any task (the generic page).
GENERIC_FACTS = {"colors": dict(zip(COLOR_PARTS, ("white", "black", "blue", "lightgray"))), "layout": "single",
                 "sections": ["About Us", "Services", "Contact"]}

STYLE = ("body{margin:0;background:var(--background);color:var(--text)}h2,b{color:var(--accent)}"
         "header{background:var(--band);padding:20px}main{padding:20px}.hero header{padding:90px}"
         ".sidebar{display:flex}.cards main{columns:2}main>*{border:4px solid var(--accent);margin:0;padding:20px}"
         ".box{background:var(--accent);height:120px}")
TEMPLATE = ("<html><style>:root{{{colors}}}</style>\n"
            '<body class="{layout}"><header><h1>{title}</h1></header><main>\n{sections}</main></body></html>')

def build_page(facts, title):
    """The page of `facts` ({"colors", "layout", "sections"}; GENERIC_FACTS' values for what is
    missing) under `title`. Sections whose title is not a SECTIONS title are left out."""
    facts = {**GENERIC_FACTS, **facts}
    colors = ";".join(f"--{part}:{facts['colors'].get(part, GENERIC_FACTS['colors'][part])}" for part in COLOR_PARTS)
    titles = [t for t in facts["sections"] if t in TITLES]
    sections = "".join(f"<h2>{t}</h2>{SECTIONS[TITLES[t]][1]}\n" for t in titles)
    return TEMPLATE.format(colors=colors, layout=facts["layout"], title=title, sections=sections)
