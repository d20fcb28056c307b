"""The word lists of DAC's rule-based negatives, verbatim from the released code (SivanDoveh/DAC@ca23611,
src/SVLC_learning/{color,action,material,size,state}_list.py, in their order; DAC took them from SVLC). Some entries
hold a space ("attached to", "bamboo "): the released rule never finds those in a caption's words, only puts them in."""

WORD_LISTS: dict[str, tuple[str, ...]] = {
    "color": (
        "teal", "brown", "green", "black", "silver", "white", "yellow", "purple", "gray", "blue", "orange", "red", "blond",
        "concrete", "cream", "beige", "tan", "pink", "maroon", "olive", "violet", "charcoal", "bronze", "gold", "navy",
        "coral", "burgundy", "mauve", "peach", "rust", "cyan", "clay", "ruby", "amber",
    ),
    "action": (
        "above", "across", "against", "along", "attached to", "behind", "belonging to", "between", "carrying", "covered in",
        "covering", "eating", "flying in", "for", "from", "growing on", "hanging from", "has", "holding", "in",
        "in front of", "laying on", "looking at", "lying on", "made of", "mounted on", "near", "of", "on", "on back of",
        "over", "painted on", "parked on", "part of", "playing", "riding", "says", "sitting on", "standing on", "under",
        "using", "walking in", "walking on", "watching", "wearing", "wears", "with",
    ),
    "material": (
        "rubber", "metal", "denim", "wooden", "cloth", "silk", "plastic", "bamboo ", "stone", "wicker", "brick", "smooth",
        "steel", "iron", "silver", "wool", "gold", "glass", "helium", "hydrogen", "ice", "lace", "lead", "alloy",
        "aluminum", "asbestos", "ash", "brass", "bronze", "carbon dioxide", "cardboard", "cement", "chalk", "charcoal",
        "clay", "coal", "copper", "cotton", "dust", "fiberglass", "gas", "leather", "linen", "magnesium", "man-made fibers",
        "marble", "mercury", "mortar", "mud", "nickel", "nitrogen", "nylon", "oil", "oxygen", "paper", "paraffin", "petrol",
        "plaster", "platinum", "polyester", "sand", "slate", "smoke", "soil", "steam", "straw", "tin", "uranium", "water",
        "wood", "zinc",
    ),
    "size": (
        "long", "old", "extended", "light", "hefty", "scraggy", "heavy", "scanty", "broad", "little", "stout", "curvy",
        "miniature", "thickset", "emaciated", "minute", "tiny", "illimitable", "sizable", "bulky", "mammoth", "strapping",
        "enormous", "obese", "towering", "fleshy", "petite", "underweight", "compact", "measly", "teensy", "grand", "puny",
        "expansive", "oversize", "trim", "beefy", "lanky", "slender", "gaunt", "pocket-size", "wee", "cubby", "mini",
        "thick", "full-size", "pint-size", "unlimited", "elfin", "minuscule", "thin", "epic", "outsized", "trifling",
        "huge", "scrawny", "giant", "portly", "wide", "brawny", "limitless", "stocky", "big", "large", "slim", "immense",
        "skimpy", "immeasurable", "skeletal", "colossal", "meager", "tall", "gigantic", "pudgy", "extensive", "overweight",
        "tubby", "cosmic", "microscopic", "teeny", "boundless", "life-size", "squat", "fat", "paltry", "undersized", "bony",
        "lean", "small", "chunky", "massive", "sturdy", "great", "rotund", "endless", "narrow", "titanic", "hulking",
        "short", "infinitesimal", "skinny", "gargantuan", "plump", "vast",
    ),
    "state": (
        "tinted", "dust", "dirty", "flip", "calm", "burnt", "sad", "dry", "sunny", "old", "young", "broken", "stormy",
        "overcast", "unhappy", "cloudless", "adult", "wet", "foggy", "curly", "stained", "rough", "pale", "white", "fresh",
        "stainedgood", "new", "first", "last", "long", "great", "little", "own", "other", "right", "big", "high",
        "different", "small", "large", "next", "early", "important", "few", "public", "bad", "same", "able",
    ),
}
