//! The variables one invocation's expressions see: `object`, `oldObject`,
//! `request`, `params`, `namespaceObject`, `authorizer` and the lazily
//! evaluated `variables`.

use crate::cel::access::Access;
use crate::cel::convert::json_to_val_for;
use crate::cel::cost::{OUT_OF_BUDGET, RUNTIME_CEL_COST_BUDGET};
use crate::cel::{error_text, CelEnvironment, CompiledExpression};
use cel::common::traits::Indexer;
use cel::common::types::{self, CelList, CelMap, CelMapKey, CelString, Type};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::ExecutionError;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// A policy variable, compiled (or the reason it did not compile).
#[derive(Debug, Clone)]
pub struct CompiledVariable {
    /// `variables[].name`.
    pub name: String,
    /// The compiled expression, or its compile error text.
    pub expression: Result<CompiledExpression, String>,
}

/// A JSON input: its name, what the expressions can observe of it, and its
/// CEL form once converted.
type LazyInput<'a> = (
    &'static str,
    &'a Json,
    &'a Access,
    OnceLock<Box<dyn Val + 'a>>,
);

/// The inputs of one invocation, with the memo of its variables.
///
/// JSON inputs are converted to CEL values on first use only: most
/// expressions read one or two of them.
pub struct Activation<'a> {
    env: &'a CelEnvironment,
    json_inputs: Vec<LazyInput<'a>>,
    inputs: Vec<(&'static str, Box<dyn Val + 'a>)>,
    variables: &'a [CompiledVariable],
    cells: Vec<OnceLock<Result<Box<dyn Val + 'static>, String>>>,
    /// The cost budget left to the expressions evaluated here (upstream's
    /// `remainingBudget` of `activation.Evaluate`).
    budget: AtomicI64,
    /// The cost of the variables evaluated since the last expression.
    variables_cost: AtomicU64,
    out_of_budget: AtomicBool,
}

impl std::fmt::Debug for Activation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation").finish_non_exhaustive()
    }
}

impl<'a> Activation<'a> {
    /// An activation over JSON inputs (name, value, what the expressions
    /// and variables can observe of it), other inputs (name, value) and the
    /// policy's variables.
    pub fn new(
        env: &'a CelEnvironment,
        json_inputs: Vec<(&'static str, &'a Json, &'a Access)>,
        inputs: Vec<(&'static str, Box<dyn Val + 'a>)>,
        variables: &'a [CompiledVariable],
    ) -> Self {
        Activation {
            env,
            json_inputs: json_inputs
                .into_iter()
                .map(|(name, json, access)| (name, json, access, OnceLock::new()))
                .collect(),
            inputs,
            variables,
            cells: (0..variables.len()).map(|_| OnceLock::new()).collect(),
            budget: AtomicI64::new(RUNTIME_CEL_COST_BUDGET),
            variables_cost: AtomicU64::new(0),
            out_of_budget: AtomicBool::new(false),
        }
    }

    /// Sets the cost budget of the expressions evaluated here (a mutation's
    /// is `RUNTIME_CEL_COST_BUDGET`, the default; the match conditions of an
    /// invocation share `RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS`).
    pub fn with_budget(self, budget: i64) -> Self {
        self.budget.store(budget, Relaxed);
        self
    }

    /// Whether an evaluation ran out of the budget: its error is then
    /// upstream's `OUT_OF_BUDGET`, which is no error of the expression.
    pub fn out_of_budget(&self) -> bool {
        self.out_of_budget.load(Relaxed)
    }

    /// Evaluates `expr` and hands its result to `f` while the result still
    /// borrows the inputs; errors come back in upstream's words.
    ///
    /// As upstream's `activation.Evaluate`, the cost of the variables it
    /// evaluated, then its own, are taken from the budget; past it, the
    /// error is [`OUT_OF_BUDGET`] and [`Activation::out_of_budget`] is set.
    pub fn evaluate<T>(
        &self,
        expr: &CompiledExpression,
        f: impl FnOnce(&dyn Val) -> T,
    ) -> Result<T, String> {
        let (result, cost) = self.run(expr, f);
        let mut budget = self.budget.load(Relaxed);
        for spent in [self.variables_cost.swap(0, Relaxed), cost] {
            let spent = i64::try_from(spent).unwrap_or(i64::MAX);
            if spent > budget {
                self.out_of_budget.store(true, Relaxed);
                return Err(OUT_OF_BUDGET.to_string());
            }
            budget -= spent;
        }
        self.budget.store(budget, Relaxed);
        result
    }

    /// Evaluates `expr` within the per-call cost limit; returns its cost too.
    fn run<T>(
        &self,
        expr: &CompiledExpression,
        f: impl FnOnce(&dyn Val) -> T,
    ) -> (Result<T, String>, u64) {
        if let Some((value, cost)) = expr.evaluate_planned(self.env.env(), self) {
            #[cfg(debug_assertions)]
            self.check_plan(expr, &*value, cost);
            return (Ok(f(&*value)), cost);
        }
        let mut ctx = self.env.context();
        ctx.set_variable_resolver(self);
        let (result, cost) = expr.evaluate_with_cost(&ctx);
        let result = match result {
            Ok(v) => Ok(f(&*v)),
            Err(e) => Err(error_text(&e)),
        };
        (result, cost)
    }

    /// In debug builds (every test), a planned evaluation is checked against
    /// the crate's: the same value, of the same type, at the same cost.
    #[cfg(debug_assertions)]
    fn check_plan(&self, expr: &CompiledExpression, planned: &dyn Val, planned_cost: u64) {
        let mut ctx = self.env.context();
        ctx.set_variable_resolver(self);
        let (result, cost) = expr.evaluate_with_cost(&ctx);
        let json = |v: &dyn Val| crate::cel::convert::val_to_json(v).ok();
        let same = match &result {
            Ok(v) => {
                v.get_type().name() == planned.get_type().name()
                    && (**v == *planned
                        || json(v.as_ref()).is_some_and(|j| Some(j) == json(planned))
                        // Values with no equality of their own (an authorizer).
                        || format!("{:?}", v.as_ref()) == format!("{planned:?}"))
            }
            Err(_) => false,
        };
        assert!(
            same && cost == planned_cost,
            "the plan of `{}` evaluated to {planned:?} at cost {planned_cost}, the crate to {result:?} at cost {cost}",
            expr.source()
        );
    }

    fn variable(&self, index: usize) -> Result<&(dyn Val + 'static), ExecutionError> {
        let cell = self.cells[index].get_or_init(|| {
            let var = &self.variables[index];
            match &var.expression {
                // Upstream's composition environment: a variable that does
                // not compile fails whoever reads it, and only them.
                Err(e) => Err(format!(
                    "composited variable \"{}\" fails to compile: {e}",
                    var.name
                )),
                Ok(expr) => {
                    // Upstream reports a variable's cost, failed or not, to
                    // the expression that evaluated it.
                    let (result, cost) = self.run(expr, to_static);
                    self.variables_cost.fetch_add(cost, Relaxed);
                    result.and_then(|r| r).map_err(|cause| {
                        format!(
                            "composited variable \"{}\" fails to evaluate: {}",
                            var.name, cause
                        )
                    })
                }
            }
        });
        match cell {
            Ok(v) => Ok(v.as_ref()),
            Err(message) => Err(ExecutionError::function_error("variables", message)),
        }
    }
}

/// Copies a value out of the evaluation so that it outlives it.
///
/// Strings, lists and maps (what variables mostly hold) are copied in one
/// pass; other values go through `cel::Value`, which owns its data.
fn to_static(v: &dyn Val) -> Result<Box<dyn Val + 'static>, String> {
    if let Some(fields) = crate::cel::convert::as_selected_fields(v) {
        let mut entries: HashMap<CelMapKey<'static>, Box<dyn Val + 'static>> = HashMap::new();
        for (key, value, access) in fields.present() {
            let value = to_static(json_to_val_for(value, access).as_ref())?;
            entries.insert(CelMapKey::from(key.clone()), value);
        }
        return Ok(Box::new(CelMap::from(entries)));
    }
    if let Some(s) = v.downcast_ref::<CelString>() {
        return Ok(Box::new(s.clone().into_static()));
    }
    if let Some(list) = v.downcast_ref::<CelList>() {
        let items = list
            .inner()
            .iter()
            .map(|item| to_static(item.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Box::new(CelList::from(items)));
    }
    if let Some(map) = v.downcast_ref::<CelMap>() {
        let mut entries: HashMap<CelMapKey<'static>, Box<dyn Val + 'static>> =
            HashMap::with_capacity(map.inner().len());
        for (key, value) in map.inner() {
            entries.insert(key.clone().into_static(), to_static(value.as_ref())?);
        }
        return Ok(Box::new(CelMap::from(entries)));
    }
    if let Some(object) = crate::cel::object_types::as_struct(v) {
        return Ok(Box::new(object.to_static(to_static)?));
    }
    if let Some(decision) = crate::cel::authz::to_static(v) {
        return Ok(decision);
    }
    let value = cel::Value::try_from(v).map_err(|e| error_text(&e))?;
    Box::<dyn Val>::try_from(value).map_err(|e| error_text(&e))
}

impl VariableResolver for Activation<'_> {
    /// A variable, or a qualified name (`object.spec.containers`,
    /// `variables.name`) that starts with one.
    ///
    /// The `cel` crate resolves a field selection on a variable as a
    /// qualified name first: it asks for `a.b.c`, then `a.b`, then `a`,
    /// and selects the fields left. No variable of ours has a dot in its
    /// name, nor does any declared type name start with one of ours, so the
    /// value of `a.b.c` is that of selecting `b` then `c` on `a`: answering
    /// it here saves the crate the shorter lookups and the selections.
    /// A name whose selection would fail is not answered: the crate then
    /// selects step by step and reports the error as it always has.
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if let Some((root, fields)) = variable.split_once('.') {
            return self.resolve_selection(root, fields);
        }
        if variable == "variables" {
            return Some(CowVal::Owned(Box::new(VariablesView { activation: self })));
        }
        if let Some((_, json, access, cell)) = self
            .json_inputs
            .iter()
            .find(|(name, _, _, _)| *name == variable)
        {
            return Some(CowVal::Borrowed(
                cell.get_or_init(|| json_to_val_for(json, access)).as_ref(),
            ));
        }
        self.inputs
            .iter()
            .find(|(name, _)| *name == variable)
            .map(|(_, v)| CowVal::Borrowed(v.as_ref()))
    }
}

impl Activation<'_> {
    /// The value of selecting `fields` (dot-separated) on the variable
    /// `root`, when that selection succeeds (see [`VariableResolver::resolve`]).
    fn resolve_selection<'b>(&'b self, root: &str, fields: &str) -> Option<CowVal<'b, 'b>> {
        if root == "variables" {
            // `variables.name`: the variable's value, once evaluated without
            // an error (the memo keeps an error for the crate's own path).
            if fields.contains('.') {
                return None;
            }
            let index = self.variables.iter().position(|v| v.name == fields)?;
            return self.variable(index).ok().map(CowVal::Borrowed);
        }
        let (_, mut json, mut access, _) =
            self.json_inputs.iter().find(|(name, ..)| *name == root)?;
        // An input read whole is converted once, on first use: selections
        // borrow from that conversion, through the crate.
        if !matches!(access, Access::Fields(_)) {
            return None;
        }
        // As `SelectedFields::get` would, field by field (below a field
        // read whole, as the selection on its converted map would).
        for field in fields.split('.') {
            let Json::Object(map) = json else {
                return None;
            };
            access = match access {
                Access::Fields(selected) => selected.get(field)?,
                Access::Full => access,
                Access::None | Access::Present | Access::Elements(_) => return None,
            };
            json = map.get(field)?;
        }
        Some(CowVal::Owned(json_to_val_for(json, access)))
    }
}

/// The `variables` object: each field evaluates its expression on first use.
struct VariablesView<'b, 'a> {
    activation: &'b Activation<'a>,
}

impl std::fmt::Debug for VariablesView<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("variables")
    }
}

static VARIABLES_TYPE: Type = types::MAP_TYPE;

impl Val for VariablesView<'_, '_> {
    fn get_type(&self) -> &Type {
        &VARIABLES_TYPE
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &VARIABLES_TYPE
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(VariablesView {
            activation: self.activation,
        })
    }

    fn as_indexer<'c, 'v>(&'c self) -> Option<&'c (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}

impl Indexer for VariablesView<'_, '_> {
    fn get<'c, 'v>(&'c self, idx: &dyn Val) -> Result<CowVal<'c, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let name = idx
            .downcast_ref::<CelString>()
            .map(|s| s.inner())
            .ok_or_else(|| ExecutionError::no_such_key("variables"))?;
        let index = self
            .activation
            .variables
            .iter()
            .position(|v| v.name == name)
            .ok_or_else(|| ExecutionError::no_such_key(name))?;
        self.activation.variable(index).map(CowVal::Borrowed)
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(|v| v.into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The value (as JSON) or the error of `source` over `object` read as
    /// `access`, with the variables `vars` (name, expression).
    fn eval(source: &str, object: &Json, access: &Access, vars: &[(&str, &str)]) -> String {
        let env = CelEnvironment::shared();
        let variables: Vec<CompiledVariable> = vars
            .iter()
            .map(|(name, expr)| CompiledVariable {
                name: name.to_string(),
                expression: env.compile(expr).map_err(|e| e.to_string()),
            })
            .collect();
        let expr = env.compile(source).expect("compiles");
        let activation = Activation::new(
            &env,
            vec![("object", object, access)],
            Vec::new(),
            &variables,
        );
        match activation.evaluate(&expr, |v| crate::cel::convert::val_to_json(v)) {
            Ok(Ok(json)) => json.to_string(),
            Ok(Err(e)) => format!("not JSON: {e}"),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn a_selection_on_a_null_input_names_the_missing_key() {
        let null = Json::Null;
        for (source, error) in [
            ("object.metadata.name", "error: no such key: metadata"),
            ("object['spec'].replicas", "error: no such key: spec"),
            ("[1].map(x, {'a': object.kind})", "error: no such key: kind"),
            ("has(object.metadata)", "false"),
            ("object.?metadata.orValue('none')", "\"none\""),
            ("object == null && null == object", "true"),
            ("type(object) == null_type", "true"),
        ] {
            assert_eq!(eval(source, &null, &Access::Full, &[]), error, "{source}");
        }
        // Other selections on null keep the crate's text.
        assert!(eval("dyn(null).x", &json!({}), &Access::Full, &[]).contains("no such overload"));
    }

    #[test]
    fn qualified_names_select_as_field_by_field() {
        let object = json!({
            "metadata": {"name": "web", "labels": {"app": "shop"}},
            "spec": {"replicas": 2, "containers": [{"name": "a", "image": "x"}, {"name": "b"}]}
        });
        let selected = Access::fields(&[
            (
                "metadata",
                Access::fields(&[("name", Access::Full), ("labels", Access::Full)]),
            ),
            (
                "spec",
                Access::fields(&[
                    ("replicas", Access::Full),
                    (
                        "containers",
                        Access::Elements(Box::new(Access::fields(&[("name", Access::Full)]))),
                    ),
                ]),
            ),
        ]);
        let vars = [
            ("meta", "object.metadata"),
            ("broken", "object.metadata.missing"),
        ];
        // Each expression against itself with the chain broken by `dyn()`,
        // which the crate never resolves as a qualified name.
        let cases = [
            ("object.spec.containers[1].name", Some("\"b\"")),
            ("object.metadata.labels", Some("{\"app\":\"shop\"}")),
            (
                "object.metadata.missing",
                Some("error: no such key: missing"),
            ),
            ("object.spec.replicas.value", None),
            ("object.spec.containers.name", None),
            ("has(object.metadata.labels)", Some("true")),
            ("has(object.metadata.annotations)", Some("false")),
            ("has(object.spec.replicas.value)", None),
            ("variables.meta.name", Some("\"web\"")),
            ("variables.meta", None),
            ("variables.broken", None),
            ("variables.broken.name", None),
            ("variables.undeclared", None),
        ];
        for access in [&selected, &Access::Full] {
            for (source, expected) in cases {
                let got = eval(source, &object, access, &vars);
                let reference = source.replacen("object.", "dyn(object).", 1).replacen(
                    "variables.",
                    "dyn(variables).",
                    1,
                );
                assert_eq!(got, eval(&reference, &object, access, &vars), "{source}");
                if let Some(expected) = expected {
                    assert_eq!(got, expected, "{source}");
                }
            }
        }
    }

    #[test]
    fn a_variable_keeps_an_object_built_from_the_input() {
        let object = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let vars = [(
            "o",
            "Object{spec: Object.spec{replicas: object.spec.replicas, name: object.metadata.name}}",
        )];
        assert_eq!(
            eval("variables.o", &object, &Access::Full, &vars),
            r#"{"spec":{"name":"web","replicas":2}}"#
        );
        assert_eq!(
            eval("variables.o.spec.name", &object, &Access::Full, &vars),
            "\"web\""
        );
        assert_eq!(
            eval(
                "[variables.o, variables.o].map(x, x.spec.replicas)",
                &object,
                &Access::Full,
                &vars
            ),
            "[2,2]"
        );
    }
}
