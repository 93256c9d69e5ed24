"""The one page template of the embedded frontend tasks: the facts a person can tell, and the page they fill.

A page is decided by three facts, each a value in one slot of TEMPLATE:
    colors    four CSS color names in the :root line (background, text, accent, band)
    layout    the <body> class: single, hero, sidebar or cards
    sections  which section kinds appear, and in what order (SECTIONS: each kind has one fixed title and
              body); the menu links to them, by their titles
Everything else is fixed, the same in every task: the style sheet, the font, the menu's look, each
section's body. The title is the business's name, which the request gives. So a page with every fact right is the
reference page itself, and what nobody tells never decides a score.
"""

# name -> (background, text, accent, band), as CSS color names: the accent colors headings, links and boxes;
# the band the header and the sidebar, under the text's color.
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
           "sidebar": "the title and menu in a band down the left side", "cards": "the sections in two columns"}
# kind -> (title, body): every page that has a kind shows it with this title and body.
SECTIONS = {
    "about": ("About Us", "<p>We are a small local team. Come and say hello!</p>"),
    "services": ("Services", '<div class="row"><p>Quality</p><p>Care</p><p>Value</p></div>'),
    "hours": ("Hours", "<table><tr><td>Mon-Fri</td><td>9-6</td></tr><tr><td>Sat</td><td>10-4</td></tr></table>"),
    "team": ("Our Team", "<ul><li>Anna</li><li>Ben</li><li>Cleo</li></ul>"),
    "reviews": ("Reviews", "<blockquote>Wonderful, every single time. - Dana</blockquote>"),
    "gallery": ("Gallery", '<div class="row"><i></i><i></i><i></i><i></i></div>'),
    "faq": ("FAQ", "<p><b>Do I need to book?</b> No, just come by.</p>"),
    "contact": ("Contact", '<form><input placeholder="Your email"><button>Send</button></form>'),
}
TITLES = {title: kind for kind, (title, _) in SECTIONS.items()}

# The page with nothing told: what a script writes for any task (the generic page).
GENERIC_FACTS = {"colors": dict(zip(COLOR_PARTS, ("white", "black", "blue", "lightgray"))), "layout": "single",
                 "sections": ["About Us", "Services", "Contact"]}

STYLE = (
    "body{margin:0;background:var(--background);color:var(--text)}h2,a{color:var(--accent)}"
    "header,.sidebar>div{background:var(--band);padding:20px}main{padding:9px 20px}"
    "nav{background:var(--accent);padding:20px}nav a{color:var(--background);margin:9px}.sidebar a{display:block}"
    ".hero header{padding:90px}.sidebar{display:grid;grid-template-columns:250px 1fr}.cards main{columns:2}"
    "section{break-inside:avoid}.row{display:flex;gap:20px}.row>*{flex:1;background:var(--accent);padding:30px}")
TEMPLATE = ("<html><style>:root{{{colors}}}" + STYLE.replace("{", "{{").replace("}", "}}") + "</style>\n"
            '<body class="{layout}"><div><header><h1>{title}</h1></header><nav>{menu}</nav></div>\n'
            "<main>\n{sections}</main></body></html>")


def build_page(facts, title):
    """The page of `facts` ({"colors", "layout", "sections"}; GENERIC_FACTS' values for what is
    missing) under `title`. Sections whose title is not a SECTIONS title are left out."""
    facts = {**GENERIC_FACTS, **facts}
    colors = ";".join(f"--{part}:{facts['colors'].get(part, GENERIC_FACTS['colors'][part])}" for part in COLOR_PARTS)
    titles = [t for t in facts["sections"] if t in TITLES]
    menu = "".join(f"<a>{t}</a>" for t in titles)
    sections = "".join(f"<section><h2>{t}</h2>{SECTIONS[TITLES[t]][1]}</section>\n" for t in titles)
    return TEMPLATE.format(colors=colors, layout=facts["layout"], title=title, menu=menu, sections=sections)
