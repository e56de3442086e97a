# Untrained facet control codes on CSFCube: minilm with [BACKGROUND] [METHOD] [RESULT] [DOC] added (embeddings
# started from their names), every paper coded [DOC]; then min-L2 with the queries coded [DOC] (none) or their facet (auto).
set -e
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
PY=${PYTHON:-python}
$PY -c "
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.codes import codes_for
e = ContextualSentenceEncoder.from_pretrained('minilm')
e.add_codes(*codes_for('facet', ['cocite']))
e.save_pretrained('runs/minilm-facetcodes')
"
mkdir -p runs; date +%s > runs/fc.start
$PY -m aspire.evaluate csfcube --model runs/minilm-facetcodes --scorer minl2 --facet-code none --out runs/csfcube/minilm-facetcodes-none --quiet > runs/fc-none.log 2>&1
date +%s > runs/fc.mid
$PY -m aspire.evaluate csfcube --model runs/minilm-facetcodes --scorer minl2 --facet-code auto --out runs/csfcube/minilm-facetcodes-auto --quiet > runs/fc-auto.log 2>&1
date +%s > runs/fc.end
