"""SVLC's rule-based negative word lists (Doveh et al., CVPR 2023), copied from its released code, github.com/SivanDoveh/TSVLC,
src/SVLC_learning/{color,action,material,size,state}_list.py, entry for entry and in their order.

Kept as released, since the released rule (`compclip.methods.svlc.rule_based_negatives`) is the definition: "bamboo "
with its trailing space (it never matches a whole word), "stainedgood" (the state list's "stained" "good" lacking a
comma, which Python joins), the multi-word action entries ("attached to": never a whole word either, but a
replacement), and words in two lists ("white" a colour and a state, "silver" a colour and a material). The released
noun_list.py is not read by its negatives (`Negatives.dict_lists`) and is not copied."""
from __future__ import annotations

# src/SVLC_learning/color_list.py, color_list (34 entries)
COLOR = (
    "teal", "brown", "green", "black", "silver", "white", "yellow", "purple", "gray", "blue", "orange", "red", "blond",
    "concrete", "cream", "beige", "tan", "pink", "maroon", "olive", "violet", "charcoal", "bronze", "gold", "navy",
    "coral", "burgundy", "mauve", "peach", "rust", "cyan", "clay", "ruby", "amber",
)

# src/SVLC_learning/action_list.py, action_list (47 entries)
ACTION = (
    "above", "across", "against", "along", "attached to", "behind", "belonging to", "between", "carrying", "covered in",
    "covering", "eating", "flying in", "for", "from", "growing on", "hanging from", "has", "holding", "in", "in front of",
    "laying on", "looking at", "lying on", "made of", "mounted on", "near", "of", "on", "on back of", "over", "painted on",
    "parked on", "part of", "playing", "riding", "says", "sitting on", "standing on", "under", "using", "walking in",
    "walking on", "watching", "wearing", "wears", "with",
)

# src/SVLC_learning/material_list.py, material_list (71 entries)
MATERIAL = (
    "rubber", "metal", "denim", "wooden", "cloth", "silk", "plastic", "bamboo ", "stone", "wicker", "brick", "smooth",
    "steel", "iron", "silver", "wool", "gold", "glass", "helium", "hydrogen", "ice", "lace", "lead", "alloy", "aluminum",
    "asbestos", "ash", "brass", "bronze", "carbon dioxide", "cardboard", "cement", "chalk", "charcoal", "clay", "coal",
    "copper", "cotton", "dust", "fiberglass", "gas", "leather", "linen", "magnesium", "man-made fibers", "marble",
    "mercury", "mortar", "mud", "nickel", "nitrogen", "nylon", "oil", "oxygen", "paper", "paraffin", "petrol", "plaster",
    "platinum", "polyester", "sand", "slate", "smoke", "soil", "steam", "straw", "tin", "uranium", "water", "wood", "zinc",
)

# src/SVLC_learning/size_list.py, size_list (104 entries)
SIZE = (
    "long", "old", "extended", "light", "hefty", "scraggy", "heavy", "scanty", "broad", "little", "stout", "curvy",
    "miniature", "thickset", "emaciated", "minute", "tiny", "illimitable", "sizable", "bulky", "mammoth", "strapping",
    "enormous", "obese", "towering", "fleshy", "petite", "underweight", "compact", "measly", "teensy", "grand", "puny",
    "expansive", "oversize", "trim", "beefy", "lanky", "slender", "gaunt", "pocket-size", "wee", "cubby", "mini", "thick",
    "full-size", "pint-size", "unlimited", "elfin", "minuscule", "thin", "epic", "outsized", "trifling", "huge", "scrawny",
    "giant", "portly", "wide", "brawny", "limitless", "stocky", "big", "large", "slim", "immense", "skimpy",
    "immeasurable", "skeletal", "colossal", "meager", "tall", "gigantic", "pudgy", "extensive", "overweight", "tubby",
    "cosmic", "microscopic", "teeny", "boundless", "life-size", "squat", "fat", "paltry", "undersized", "bony", "lean",
    "small", "chunky", "massive", "sturdy", "great", "rotund", "endless", "narrow", "titanic", "hulking", "short",
    "infinitesimal", "skinny", "gargantuan", "plump", "vast",
)

# src/SVLC_learning/state_list.py, state_list (48 entries)
STATE = (
    "tinted", "dust", "dirty", "flip", "calm", "burnt", "sad", "dry", "sunny", "old", "young", "broken", "stormy",
    "overcast", "unhappy", "cloudless", "adult", "wet", "foggy", "curly", "stained", "rough", "pale", "white", "fresh",
    "stainedgood", "new", "first", "last", "long", "great", "little", "own", "other", "right", "big", "high", "different",
    "small", "large", "next", "early", "important", "few", "public", "bad", "same", "able",
)

# the released `Negatives.dict_lists`, and `--vl_neg_type`'s default order (src/training/params.py): color, action, material, size, state
LISTS = {"color": COLOR, "action": ACTION, "material": MATERIAL, "size": SIZE, "state": STATE}
