//! The op table: one row per opcode of `proto/ovl.proto`, the single source of what an opcode
//! is (its name, category, operand count and classes, result rule, block structure and
//! spelling in generated code).
//!
//! The validator ([`crate::validate`]), the reference interpreter (ovl-core), the C++/CUDA
//! emitter (ovl-codegen), the fusion pass (ovl-fuse) and the text printer ([`crate::text`])
//! read this table instead of keeping their own op lists; what stays per consumer is what only
//! it knows (the interpreter's arithmetic, the emitter's interval analysis).
//!
//! ```
//! use ovl_ir::ir::Op;
//! use ovl_ir::ops::{info, Category, Class, Form, ResultRule};
//! use ovl_ir::DType;
//!
//! let add = info(Op::Add).unwrap();
//! assert_eq!(add.name, "add");
//! assert_eq!(add.category, Category::Binary);
//! assert_eq!(add.arity, Some(2));
//! assert!(add.operands.accepts(DType::I32) && !add.operands.accepts(DType::Bool));
//! assert_eq!(add.result, ResultRule::SameAsOperands);
//! assert_eq!(add.spelling.for_dtype(DType::F32), Form::Infix("+"));
//! assert_eq!(add.spelling.for_dtype(DType::I32), Form::Call("ovl::add"));
//! ```

use crate::dtype::DType;
use crate::ir::Op;

/// What kind of expression an opcode is; consumers dispatch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// CONST, POSITION: a value from the expression's own fields, no operands.
    Leaf,
    /// READ, WRITE, LOCAL_TENSOR: access to a tensor named by the expression's `tensor`.
    Tensor,
    /// VARIABLE, ASSIGN: worker-local scalars.
    Variable,
    /// CAST: one operand converted to the declared dtype.
    Cast,
    /// Elementwise with one operand.
    Unary,
    /// Elementwise arithmetic with two operands of one dtype; the result has that dtype.
    Binary,
    /// Comparisons and logic: two operands of one dtype, a bool result.
    Compare,
    /// SELECT and FMA: three operands.
    Ternary,
    /// IF ... WHILE_END: structured control flow, nested by position in the program.
    Control,
}

/// The operand dtypes an opcode accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Every dtype.
    Any,
    /// Integers and floats, not bool.
    Numeric,
    /// f32 and f64.
    Float,
    /// bool and integers.
    BoolOrInt,
    /// Integers only (not bool, not floats).
    Int,
    /// bool only.
    Bool,
    /// i64 only (range bounds).
    I64,
}

impl Class {
    /// Whether an operand of dtype `d` is accepted.
    pub fn accepts(self, d: DType) -> bool {
        match self {
            Class::Any => true,
            Class::Numeric => d != DType::Bool,
            Class::Float => d.is_float(),
            Class::BoolOrInt => d == DType::Bool || d.is_int(),
            Class::Int => d.is_int(),
            Class::Bool => d == DType::Bool,
            Class::I64 => d == DType::I64,
        }
    }

    /// The class in words, for error messages ("takes float operands (f32 or f64); ...").
    pub fn describe(self) -> &'static str {
        match self {
            Class::Any => "any dtype",
            Class::Numeric => "integer or float operands (not bool)",
            Class::Float => "float operands (f32 or f64); cast integers first",
            Class::BoolOrInt => "bool or integer operands",
            Class::Int => "integer operands (not bool or floats); cast first",
            Class::Bool => "bool operands",
            Class::I64 => "i64 operands",
        }
    }
}

/// The dtype of an expression's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResultRule {
    /// A statement: no value, dtype `DTYPE_UNSPECIFIED`.
    Statement,
    /// The dtype of the (elementwise) operands.
    SameAsOperands,
    /// bool.
    Bool,
    /// i64 (a position component, a loop index).
    I64,
    /// The expression's declared dtype (CONST, CAST).
    Declared,
    /// The dtype of the tensor read.
    TensorDtype,
}

/// How an opcode shapes the block structure of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Block {
    /// Not a block delimiter.
    None,
    /// Opens a block: IF, RANGE, WHILE_BEGIN.
    Open,
    /// Separates two parts of the innermost block: ELSE, WHILE_COND.
    Middle,
    /// Closes the innermost block: END_IF, END_RANGE, WHILE_END.
    Close,
}

/// How one elementwise operation is written in generated C++ and CUDA (both dialects share
/// the spelling; their preludes define the `ovl::` functions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// Not defined for this family of dtypes.
    No,
    /// The operand itself (e.g. `abs` of an unsigned integer).
    Same,
    /// `op x`.
    Prefix(&'static str),
    /// `x op y`.
    Infix(&'static str),
    /// `f(x, ...)`.
    Call(&'static str),
}

impl Form {
    /// The C++ expression applying this form to `args`; `None` for [`Form::No`].
    pub fn apply(self, args: &[&str]) -> Option<String> {
        match (self, args) {
            (Form::No, _) => None,
            (Form::Same, [x]) => Some((*x).to_string()),
            (Form::Prefix(p), [x]) => Some(format!("{p}{x}")),
            (Form::Infix(p), [x, y]) => Some(format!("{x} {p} {y}")),
            (Form::Call(f), args) => Some(format!("{f}({})", args.join(", "))),
            _ => None,
        }
    }
}

/// The spelling of an elementwise operation per family of operand dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spelling {
    /// f32, f64.
    pub float: Form,
    /// i8 ... i64.
    pub signed: Form,
    /// u8 ... u64.
    pub unsigned: Form,
    /// bool.
    pub boolean: Form,
}

impl Spelling {
    /// No generated-code spelling (the emitter writes the opcode by hand).
    pub const NONE: Spelling = Spelling::new(Form::No, Form::No, Form::No, Form::No);

    const fn new(float: Form, signed: Form, unsigned: Form, boolean: Form) -> Spelling {
        Spelling {
            float,
            signed,
            unsigned,
            boolean,
        }
    }

    const fn float(f: &'static str) -> Spelling {
        Spelling::new(Form::Call(f), Form::No, Form::No, Form::No)
    }

    const fn numeric(float: Form, int: Form) -> Spelling {
        Spelling::new(float, int, int, Form::No)
    }

    const fn int(f: &'static str) -> Spelling {
        Spelling::new(Form::No, Form::Call(f), Form::Call(f), Form::No)
    }

    const fn all(form: Form) -> Spelling {
        Spelling::new(form, form, form, form)
    }

    /// The form used for operands of dtype `d`.
    pub fn for_dtype(&self, d: DType) -> Form {
        if d.is_float() {
            self.float
        } else if d.is_signed_int() {
            self.signed
        } else if d.is_unsigned_int() {
            self.unsigned
        } else {
            self.boolean
        }
    }
}

/// The number of lanes of a reduction loop (`REDUCE_LANES` in `proto/ovl.proto`): iteration `t`
/// of the loop combines into lane `t % REDUCE_LANES`.
pub const REDUCE_LANES: usize = 16;

/// How an accumulator (`OP_ACCUMULATOR`, its `int_value`) combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    /// `OP_ADD`; identity 0.
    Sum = 1,
    /// `OP_MUL`; identity 1.
    Product = 2,
    /// `OP_MIN`; identity +inf (floats) or the largest value (integers).
    Min = 3,
    /// `OP_MAX`; identity -inf (floats) or the smallest value (integers).
    Max = 4,
}

impl Combiner {
    /// Every combiner.
    pub const ALL: [Combiner; 4] = [
        Combiner::Sum,
        Combiner::Product,
        Combiner::Min,
        Combiner::Max,
    ];

    /// The combiner an accumulator's `int_value` names.
    pub fn from_code(code: i64) -> Option<Combiner> {
        Combiner::ALL.into_iter().find(|c| *c as i64 == code)
    }

    /// The binary op that combines two values.
    pub fn op(self) -> Op {
        match self {
            Combiner::Sum => Op::Add,
            Combiner::Product => Op::Mul,
            Combiner::Min => Op::Min,
            Combiner::Max => Op::Max,
        }
    }

    /// `sum`, `product`, `min`, `max`.
    pub fn name(self) -> &'static str {
        match self {
            Combiner::Sum => "sum",
            Combiner::Product => "product",
            Combiner::Min => "min",
            Combiner::Max => "max",
        }
    }
}

/// One row of the op table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpInfo {
    /// The opcode.
    pub op: Op,
    /// Lower case, without `OP_` (`add`, `end_range`): the IR text and error messages use it.
    pub name: &'static str,
    /// What kind of expression it is.
    pub category: Category,
    /// The number of operands; `None` when it depends on the tensor's rank (READ, WRITE).
    pub arity: Option<usize>,
    /// The operands, in words, for error messages ("start, end, step").
    pub operand_names: &'static str,
    /// The dtypes its (elementwise) operands accept.
    pub operands: Class,
    /// The dtype of its value, or that it is a statement.
    pub result: ResultRule,
    /// How it shapes the block structure.
    pub block: Block,
    /// How it is written in generated code (elementwise ops).
    pub spelling: Spelling,
    /// The work of one execution, in *operation units*: a cheap arithmetic operation, a
    /// comparison, a read, a write or an accumulation is 1; a division, a remainder or a square
    /// root 4; a transcendental function 8; `pow` and `atan2` 16; literals, positions,
    /// declarations, casts and control flow 0. The cost models (`ovl-fuse`'s recompute cost)
    /// read it: a new op states its cost here.
    pub cost: u8,
}

impl OpInfo {
    /// This row with the cost `units` (see [`OpInfo::cost`]).
    const fn costs(self, units: u8) -> OpInfo {
        OpInfo {
            cost: units,
            ..self
        }
    }

    /// Whether the expression produces a value (can be an operand).
    pub fn produces_value(&self) -> bool {
        self.result != ResultRule::Statement
    }

    /// Whether it only computes a value from its operands: no effect, no possible fault, no
    /// dependence on where it stands in the program. Such an expression may be shared or
    /// dropped. (READ is not: an out-of-bounds read is an error to report.)
    pub fn is_pure(&self) -> bool {
        matches!(
            self.category,
            Category::Leaf
                | Category::Cast
                | Category::Unary
                | Category::Binary
                | Category::Compare
                | Category::Ternary
        )
    }
}

#[allow(clippy::too_many_arguments)] // one argument per column of the table
const fn row(
    op: Op,
    name: &'static str,
    category: Category,
    arity: Option<usize>,
    operand_names: &'static str,
    operands: Class,
    result: ResultRule,
    block: Block,
    spelling: Spelling,
) -> OpInfo {
    OpInfo {
        op,
        name,
        category,
        arity,
        operand_names,
        operands,
        result,
        block,
        spelling,
        cost: match category {
            Category::Leaf | Category::Control | Category::Cast => 0,
            _ => 1,
        },
    }
}

const fn unary(op: Op, name: &'static str, operands: Class, spelling: Spelling) -> OpInfo {
    let result = ResultRule::SameAsOperands;
    row(
        op,
        name,
        Category::Unary,
        Some(1),
        "the value",
        operands,
        result,
        Block::None,
        spelling,
    )
}

const fn float_unary(op: Op, name: &'static str, f: &'static str) -> OpInfo {
    unary(op, name, Class::Float, Spelling::float(f))
}

const fn float_test(op: Op, name: &'static str, f: &'static str) -> OpInfo {
    let result = ResultRule::Bool;
    let s = Spelling::float(f);
    row(
        op,
        name,
        Category::Unary,
        Some(1),
        "the value",
        Class::Float,
        result,
        Block::None,
        s,
    )
}

const fn binary(op: Op, name: &'static str, operands: Class, spelling: Spelling) -> OpInfo {
    let (c, r) = (Category::Binary, ResultRule::SameAsOperands);
    row(
        op,
        name,
        c,
        Some(2),
        "two values",
        operands,
        r,
        Block::None,
        spelling,
    )
}

const fn compare(op: Op, name: &'static str, operands: Class, spelling: Spelling) -> OpInfo {
    let (c, r) = (Category::Compare, ResultRule::Bool);
    row(
        op,
        name,
        c,
        Some(2),
        "two values",
        operands,
        r,
        Block::None,
        spelling,
    )
}

const fn control(
    op: Op,
    name: &'static str,
    arity: usize,
    operand_names: &'static str,
    block: Block,
) -> OpInfo {
    let (c, r, s) = (Category::Control, ResultRule::Statement, Spelling::NONE);
    row(
        op,
        name,
        c,
        Some(arity),
        operand_names,
        Class::Bool,
        r,
        block,
        s,
    )
}

use Block as B;
use Category as C;
use Class as K;
use Form::{Call, Infix, Prefix};
use ResultRule as R;

/// Every opcode but `OP_UNSPECIFIED`, in the order of `proto/ovl.proto`.
#[rustfmt::skip]
pub const TABLE: [OpInfo; 72] = [
    // ---- values
    row(Op::Const, "const", C::Leaf, Some(0), "none", K::Any, R::Declared, B::None, Spelling::NONE),
    row(Op::Position, "position", C::Leaf, Some(0), "none", K::Any, R::I64, B::None, Spelling::NONE),
    row(Op::Read, "read", C::Tensor, None, "indices", K::Any, R::TensorDtype, B::None, Spelling::NONE),
    row(Op::Write, "write", C::Tensor, None, "indices and the value", K::Any, R::Statement, B::None, Spelling::NONE),
    row(Op::Variable, "variable", C::Variable, Some(1), "the initial value", K::Any, R::SameAsOperands, B::None, Spelling::NONE).costs(0),
    row(Op::Assign, "assign", C::Variable, Some(2), "the variable and the value", K::Any, R::Statement, B::None, Spelling::NONE),
    row(Op::LocalTensor, "local_tensor", C::Tensor, Some(0), "none", K::Any, R::Statement, B::None, Spelling::NONE),
    row(Op::Cast, "cast", C::Cast, Some(1), "the value", K::Any, R::Declared, B::None, Spelling::NONE),
    row(Op::Symbol, "symbol", C::Leaf, Some(0), "none", K::Any, R::I64, B::None, Spelling::NONE),
    // ---- unary
    unary(Op::Neg, "neg", K::Numeric, Spelling::numeric(Prefix("-"), Call("ovl::neg"))),
    unary(Op::Not, "not", K::BoolOrInt, Spelling::new(Form::No, Call("ovl::bnot"), Call("ovl::bnot"), Prefix("!"))),
    unary(Op::Abs, "abs", K::Numeric, Spelling::new(Call("ovl::fabs"), Call("ovl::iabs"), Form::Same, Form::No)),
    float_unary(Op::Sqrt, "sqrt", "ovl::sqrt").costs(4),
    float_unary(Op::Rsqrt, "rsqrt", "ovl::rsqrt").costs(4),
    float_unary(Op::Exp, "exp", "ovl::exp").costs(8),
    float_unary(Op::Exp2, "exp2", "ovl::exp2").costs(8),
    float_unary(Op::Expm1, "expm1", "ovl::expm1").costs(8),
    float_unary(Op::Log, "log", "ovl::log").costs(8),
    float_unary(Op::Log2, "log2", "ovl::log2").costs(8),
    float_unary(Op::Log10, "log10", "ovl::log10").costs(8),
    float_unary(Op::Log1p, "log1p", "ovl::log1p").costs(8),
    float_unary(Op::Sin, "sin", "ovl::sin").costs(8),
    float_unary(Op::Cos, "cos", "ovl::cos").costs(8),
    float_unary(Op::Tan, "tan", "ovl::tan").costs(8),
    float_unary(Op::Asin, "asin", "ovl::asin").costs(8),
    float_unary(Op::Acos, "acos", "ovl::acos").costs(8),
    float_unary(Op::Atan, "atan", "ovl::atan").costs(8),
    float_unary(Op::Sinh, "sinh", "ovl::sinh").costs(8),
    float_unary(Op::Cosh, "cosh", "ovl::cosh").costs(8),
    float_unary(Op::Tanh, "tanh", "ovl::tanh").costs(8),
    float_unary(Op::Sigmoid, "sigmoid", "ovl::sigmoid").costs(8),
    float_unary(Op::Erf, "erf", "ovl::erf").costs(8),
    float_unary(Op::Ceil, "ceil", "ovl::ceil"),
    float_unary(Op::Floor, "floor", "ovl::floor"),
    float_unary(Op::Round, "round", "ovl::round"),
    float_test(Op::Isinf, "isinf", "ovl::isinf"),
    float_test(Op::Isfinite, "isfinite", "ovl::isfinite"),
    float_test(Op::Isnan, "isnan", "ovl::isnan"),
    // ---- binary
    binary(Op::Add, "add", K::Numeric, Spelling::numeric(Infix("+"), Call("ovl::add"))),
    binary(Op::Sub, "sub", K::Numeric, Spelling::numeric(Infix("-"), Call("ovl::sub"))),
    binary(Op::Mul, "mul", K::Numeric, Spelling::numeric(Infix("*"), Call("ovl::mul"))),
    binary(Op::Div, "div", K::Numeric, Spelling::numeric(Infix("/"), Call("ovl::div"))).costs(4),
    binary(Op::Mod, "mod", K::Numeric, Spelling::numeric(Call("ovl::fmod"), Call("ovl::rem"))).costs(4),
    binary(Op::Min, "min", K::Numeric, Spelling::numeric(Call("ovl::fmin"), Call("ovl::imin"))),
    binary(Op::Max, "max", K::Numeric, Spelling::numeric(Call("ovl::fmax"), Call("ovl::imax"))),
    binary(Op::Pow, "pow", K::Float, Spelling::float("ovl::pow")).costs(16),
    binary(Op::Atan2, "atan2", K::Float, Spelling::float("ovl::atan2")).costs(16),
    compare(Op::Lt, "lt", K::Any, Spelling::all(Infix("<"))),
    compare(Op::Le, "le", K::Any, Spelling::all(Infix("<="))),
    compare(Op::Gt, "gt", K::Any, Spelling::all(Infix(">"))),
    compare(Op::Ge, "ge", K::Any, Spelling::all(Infix(">="))),
    compare(Op::Eq, "eq", K::Any, Spelling::all(Infix("=="))),
    compare(Op::Ne, "ne", K::Any, Spelling::all(Infix("!="))),
    compare(Op::And, "and", K::Bool, Spelling::new(Form::No, Form::No, Form::No, Infix("&&"))),
    compare(Op::Or, "or", K::Bool, Spelling::new(Form::No, Form::No, Form::No, Infix("||"))),
    binary(Op::BitAnd, "bit_and", K::Int, Spelling::int("ovl::band")),
    binary(Op::BitOr, "bit_or", K::Int, Spelling::int("ovl::bor")),
    binary(Op::BitXor, "bit_xor", K::Int, Spelling::int("ovl::bxor")),
    binary(Op::Shl, "shl", K::Int, Spelling::int("ovl::shl")),
    binary(Op::Shr, "shr", K::Int, Spelling::int("ovl::shr")),
    // ---- ternary
    row(Op::Select, "select", C::Ternary, Some(3), "condition, if_true, if_false", K::Any, R::SameAsOperands, B::None, Spelling::NONE),
    row(Op::Fma, "fma", C::Ternary, Some(3), "a, b, c of a * b + c", K::Float, R::SameAsOperands, B::None, Spelling::float("ovl::fma")),
    // ---- control flow
    control(Op::If, "if", 1, "the condition", B::Open),
    control(Op::Else, "else", 0, "none", B::Middle),
    control(Op::EndIf, "end_if", 0, "none", B::Close),
    row(Op::Range, "range", C::Control, Some(3), "start, end, step", K::I64, R::I64, B::Open, Spelling::NONE),
    control(Op::EndRange, "end_range", 0, "none", B::Close),
    control(Op::WhileBegin, "while_begin", 0, "none", B::Open),
    control(Op::WhileCond, "while_cond", 1, "the condition", B::Middle),
    control(Op::WhileEnd, "while_end", 0, "none", B::Close),
    // ---- reductions
    row(Op::Accumulator, "accumulator", C::Variable, Some(1), "the initial value", K::Numeric, R::SameAsOperands, B::None, Spelling::NONE).costs(0),
    row(Op::Accumulate, "accumulate", C::Variable, Some(2), "the accumulator and the value", K::Numeric, R::Statement, B::None, Spelling::NONE),
];

/// One past the largest opcode value.
const CODES: usize = 122;

/// `TABLE` row of each opcode value, `u8::MAX` where there is none.
const BY_CODE: [u8; CODES] = {
    let mut index = [u8::MAX; CODES];
    let mut i = 0;
    while i < TABLE.len() {
        index[TABLE[i].op as usize] = i as u8;
        i += 1;
    }
    index
};

/// The table row of an opcode; `None` for `OP_UNSPECIFIED`.
pub fn info(op: Op) -> Option<&'static OpInfo> {
    info_of_code(op as i32)
}

/// The table row of a raw opcode value (`Expression.code`); `None` for an unknown value and
/// for `OP_UNSPECIFIED`.
pub fn info_of_code(code: i32) -> Option<&'static OpInfo> {
    let slot = *BY_CODE.get(usize::try_from(code).ok()?)?;
    TABLE.get(slot as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_follow_the_kind_of_work() {
        let cost = |op| info(op).map(|r| r.cost);
        for op in [
            Op::Const,
            Op::Position,
            Op::Cast,
            Op::If,
            Op::Range,
            Op::Variable,
        ] {
            assert_eq!(cost(op), Some(0), "{op:?}");
        }
        for op in [
            Op::Add,
            Op::Lt,
            Op::Read,
            Op::Write,
            Op::Assign,
            Op::Accumulate,
            Op::Floor,
        ] {
            assert_eq!(cost(op), Some(1), "{op:?}");
        }
        for op in [Op::Div, Op::Mod, Op::Sqrt, Op::Rsqrt] {
            assert_eq!(cost(op), Some(4), "{op:?}");
        }
        for op in [Op::Exp, Op::Log1p, Op::Tanh, Op::Sigmoid, Op::Erf, Op::Atan] {
            assert_eq!(cost(op), Some(8), "{op:?}");
        }
        assert_eq!(cost(Op::Pow), Some(16));
        assert_eq!(cost(Op::Atan2), Some(16));
    }

    /// The table and the proto's `Op` enum agree: one row per opcode (but UNSPECIFIED), named
    /// after the proto's name.
    #[test]
    fn one_row_per_proto_opcode() {
        let mut seen = 0;
        for code in 0..1000 {
            let Ok(op) = Op::try_from(code) else {
                assert!(info_of_code(code).is_none());
                continue;
            };
            if op == Op::Unspecified {
                assert!(info(op).is_none());
                continue;
            }
            let row = info(op).unwrap_or_else(|| panic!("{op:?} has no row in ops::TABLE"));
            assert_eq!(row.op, op);
            let proto = op
                .as_str_name()
                .trim_start_matches("OP_")
                .to_ascii_lowercase();
            assert_eq!(row.name, proto);
            seen += 1;
        }
        assert_eq!(seen, TABLE.len());
    }

    #[test]
    fn elementwise_rows_spell_every_accepted_dtype() {
        for row in TABLE.iter().filter(|r| {
            matches!(
                r.category,
                Category::Unary | Category::Binary | Category::Compare
            )
        }) {
            for d in DType::ALL {
                let spelled = row.spelling.for_dtype(d) != Form::No;
                assert_eq!(spelled, row.operands.accepts(d), "{} on {d}", row.name);
            }
        }
    }

    #[test]
    fn statements_and_blocks() {
        assert!(!info(Op::Write).unwrap().produces_value());
        assert!(info(Op::Range).unwrap().produces_value());
        assert_eq!(info(Op::WhileCond).unwrap().block, Block::Middle);
        assert!(info(Op::Cast).unwrap().is_pure());
        assert!(!info(Op::Read).unwrap().is_pure());
    }
}
